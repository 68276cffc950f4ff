"""Time candidate launch configurations of the GDN short conv's three kernels, and FLA's conv beside them.

A measurement script, not a test (pytest does not collect it). On a GPU node:

    PYTHONPATH=/tmp/site:$PWD/runtime python3 tools/gpu/conv_tune.py [--tokens 4096 32768 65536] [--json F]

For each layout (Qwen3-Next's fused [q, k, v, z] projection per key head, Qwen3.5's [q | k | v],
16/32 heads of 128, W = 4) and token count (two packed sequences, 1/4 and 3/4): every candidate
configuration of the forward, the backward's dpre pass (with the default dx pass) and the dx pass
(with the best dpre pass) is checked against a float64 reference at 4096 tokens, then timed with
triton.testing.do_bench (median, L2 flushed). FLA's causal_conv1d (FLA_FLASH_QLA irrelevant here)
runs on the gathered q/k/v, as slime's layer calls it after its torch.cat, and the cat is timed too.
The last line is JSON.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import torch
import triton.testing

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from runtime.triton_ops.references import causal_conv1d_silu64, rel_error

from slime_flashqla.triton_ops import causal_conv1d as cc

DEV, DTYPE = "cuda", torch.bfloat16
LAYOUTS = {"qwen3-next": cc.ProjectionLayout(16, 128, 256, 256), "qwen3.5": cc.ProjectionLayout(1, 2048, 4096)}
C = cc.LaunchConfig
FWD = [C(16, 128, 1, 4), C(32, 128, 1, 4), C(32, 64, 1, 4), C(32, 128, 1, 2), C(64, 128, 1, 4), C(16, 64, 1, 2)]
FWD += [C(16, 128, 2, 4), C(64, 128, 1, 8), C(32, 128, 2, 8), C(16, 64, 4, 2)]
DPRE = [C(bt, bd, tiles, 4) for bt in (16, 32) for bd in (32, 64) for tiles in (8, 16)] + [C(16, 32, 16, 2)]
DPRE += [C(16, 64, 16, 2), C(16, 128, 8, 4), C(16, 128, 16, 8), C(32, 128, 8, 8), C(8, 128, 32, 4), C(32, 32, 32, 4)]
DX = [C(16, 128, 1, 4), C(32, 128, 1, 4), C(32, 128, 2, 4), C(64, 128, 1, 4), C(32, 64, 1, 4), C(32, 128, 1, 2)]
DX += [C(16, 64, 2, 2), C(16, 128, 2, 4), C(64, 128, 1, 8)]
TUNE_LAYOUT, TUNE_TOKENS = "qwen3-next", 32768


def columns(layout):
    qs, ks, vs = [], [], []
    stride = layout.group_width
    for g in range(layout.groups):
        qs += range(g * stride, g * stride + layout.q_width)
        ks += range(g * stride + layout.q_width, g * stride + 2 * layout.q_width)
        vs += range(g * stride + 2 * layout.q_width, g * stride + 2 * layout.q_width + layout.v_width)
    return torch.tensor(qs + ks + vs, device=DEV)


def inputs(layout, tokens, seed=0):
    gen = torch.Generator(device=DEV).manual_seed(seed)
    lengths = [tokens // 4, tokens - tokens // 4]
    cu = torch.tensor([0, lengths[0], tokens], dtype=torch.int32, device=DEV)
    proj = torch.randn(1, tokens, layout.width, device=DEV, generator=gen).to(DTYPE)
    weight = (torch.randn(layout.channels, 1, 4, device=DEV, generator=gen) * 0.5).to(DTYPE)
    grads = tuple(torch.randn(1, tokens, n, device=DEV, generator=gen).to(DTYPE) for n in layout.section_widths)
    return lengths, cu, proj, weight, grads


def parity(layout) -> float:
    """max relative error of y, dproj (conv columns) and dweight at 4096 tokens against float64."""
    lengths, cu, proj, weight, grads = inputs(layout, 4096, seed=1)
    outputs = cc._forward(proj, weight, cu, layout, 4)
    dproj, dweight = cc._backward(proj, weight, cu, layout, 4, grads)
    cols = columns(layout)
    p64, w64 = proj.double()[..., cols].requires_grad_(), weight.double().requires_grad_()
    y64 = causal_conv1d_silu64(p64, w64, lengths)
    y64.backward(torch.cat(grads, -1).double())
    y = torch.cat(outputs, -1)
    return max(rel_error(y, y64), rel_error(dproj[..., cols], p64.grad), rel_error(dweight, w64.grad))


def bench(fn) -> float:
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def sweep(layout, tokens, name, configs, set_config, call):
    rows = []
    for cfg in configs:
        set_config(cfg)
        try:
            err = parity(layout)
            ms = bench(call)
        except Exception as error:  # a configuration that does not compile is a row, not a crash
            rows.append({"kernel": name, "config": cfg.__dict__, "error": f"{type(error).__name__}: {error}"[:200]})
            continue
        rows.append({"kernel": name, "config": cfg.__dict__, "ms": ms, "parity": err})
    ok = [r for r in rows if "ms" in r and r["parity"] < 1.2e-2]
    best = min(ok, key=lambda r: r["ms"])
    set_config(cc.LaunchConfig(**best["config"]))
    return rows, best


def fla_conv():
    from fla.modules.causal_conv1d.ops import causal_conv1d

    return causal_conv1d


def tune(report) -> None:
    """Sweep the three kernels at Qwen3-Next's layout and 32k tokens; leave the best configurations set."""
    layout = LAYOUTS[TUNE_LAYOUT]
    _, cu, proj, weight, grads = inputs(layout, TUNE_TOKENS)

    def fwd():
        cc._forward(proj, weight, cu, layout, 4)

    def bwd():
        cc._backward(proj, weight, cu, layout, 4, grads)

    report["fwd_sweep"], best_f = sweep(layout, TUNE_TOKENS, "fwd", FWD, lambda c: setattr(cc, "FORWARD", c), fwd)
    cc.DEFER_DWEIGHT = False
    report["dpre_undeferred"], _ = sweep(
        layout, TUNE_TOKENS, "dpre-undeferred", [C(32, 64, 8, 4)], lambda c: setattr(cc, "BACKWARD_DPRE", c), bwd
    )
    cc.DEFER_DWEIGHT = True
    report["dpre_sweep"], best_p = sweep(
        layout, TUNE_TOKENS, "dpre", DPRE, lambda c: setattr(cc, "BACKWARD_DPRE", c), bwd
    )
    report["dx_sweep"], best_x = sweep(layout, TUNE_TOKENS, "dx", DX, lambda c: setattr(cc, "BACKWARD_DX", c), bwd)
    for rows in (report["fwd_sweep"], report["dpre_undeferred"] + report["dpre_sweep"], report["dx_sweep"]):
        for row in rows:
            print(f"  {row['kernel']:16} {row['config']} {row.get('ms', row.get('error'))}", flush=True)
    print(f"best fwd {best_f['config']} dpre {best_p['config']} dx {best_x['config']}", flush=True)


def apply_to_source() -> None:
    """Write the configurations now set into causal_conv1d.py (on a disposable checkout: the device's copy)."""
    path = Path(cc.__file__)
    text = path.read_text()
    for name in ("FORWARD", "BACKWARD_DPRE", "BACKWARD_DX"):
        cfg = getattr(cc, name)
        text = re.sub(
            rf"^{name} = LaunchConfig\(.*\)$",
            f"{name} = LaunchConfig(bt={cfg.bt}, bd={cfg.bd}, tiles={cfg.tiles}, warps={cfg.warps})",
            text,
            flags=re.M,
        )
    path.write_text(text)
    print(f"wrote the configurations into {path}", flush=True)


def measure(layout_name, layout, tokens, fla) -> dict:
    """Ours (kernels alone and through autograd), the gathering copy slime makes, FLA's conv on it."""
    _, cu, proj, weight, grads = inputs(layout, tokens)
    entry = {"layout": layout_name, "tokens": tokens}
    entry["ours_fwd_ms"] = bench(lambda: cc._forward(proj, weight, cu, layout, 4))
    entry["ours_bwd_ms"] = bench(lambda: cc._backward(proj, weight, cu, layout, 4, grads))
    entry["ours_parity"] = parity(layout)
    pl, wl = proj.detach().requires_grad_(), weight.detach().requires_grad_()

    def ours_autograd():
        outs = cc.short_conv_silu(pl, wl, cu, layout)
        torch.autograd.backward(outs[:3], grads)

    entry["ours_fwdbwd_ms"] = bench(ours_autograd)
    cols = columns(layout)
    mixed = proj[..., cols].contiguous().requires_grad_()
    dmixed = torch.cat(grads, -1)
    entry["cat_ms"] = bench(lambda: proj[..., cols].contiguous())
    line = (
        f"{layout_name:10} T={tokens:6} ours fwd {entry['ours_fwd_ms']:.3f} bwd {entry['ours_bwd_ms']:.3f} "
        f"fwd+bwd {entry['ours_fwdbwd_ms']:.3f} (parity {entry['ours_parity']:.1e}) | cat {entry['cat_ms']:.3f}"
    )
    if fla is not None:
        w2 = weight.squeeze(1).detach().requires_grad_()

        def fla_fwd():
            with torch.no_grad():
                fla(mixed, weight=w2, bias=None, activation="silu", cu_seqlens=cu)

        def fla_fwdbwd():
            fla(mixed, weight=w2, bias=None, activation="silu", cu_seqlens=cu)[0].backward(dmixed)

        fla_fwdbwd()
        entry["fla_fwd_ms"] = bench(fla_fwd)
        entry["fla_fwdbwd_ms"] = bench(fla_fwdbwd)
        line += f" | FLA fwd {entry['fla_fwd_ms']:.3f} fwd+bwd {entry['fla_fwdbwd_ms']:.3f}"
    print(line, flush=True)
    return entry


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[4096, 32768, 65536])
    parser.add_argument("--json", default=None)
    parser.add_argument("--quick", action="store_true", help="only the current configurations, no sweep")
    parser.add_argument("--apply", action="store_true", help="write the best configurations into causal_conv1d.py")
    parser.add_argument("--no-fla", action="store_true", help="leave FLA's conv out")
    parser.add_argument("--apply-from", default=None, help="write a report's configurations into the source and exit")
    args = parser.parse_args()
    if args.apply_from:
        configs = json.loads(Path(args.apply_from).read_text())["configs"]
        for name, key in (("FORWARD", "fwd"), ("BACKWARD_DPRE", "dpre"), ("BACKWARD_DX", "dx")):
            setattr(cc, name, cc.LaunchConfig(**configs[key]))
        apply_to_source()
        return
    report = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__}
    if not args.quick:
        tune(report)
        if args.apply:
            apply_to_source()
    report["configs"] = {
        "fwd": cc.FORWARD.__dict__,
        "dpre": cc.BACKWARD_DPRE.__dict__,
        "dx": cc.BACKWARD_DX.__dict__,
        "dpre_float32": cc.DPRE_FLOAT32,
        "defer_dweight": cc.DEFER_DWEIGHT,
    }
    fla = None if args.no_fla else fla_conv()
    results = [measure(name, layout, tokens, fla) for name, layout in LAYOUTS.items() for tokens in args.tokens]
    report["results"] = results
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    print(json.dumps({"device": report["device"], "configs": report["configs"]}))


if __name__ == "__main__":
    main()
