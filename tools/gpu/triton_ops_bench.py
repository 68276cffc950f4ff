"""slime_flashqla.triton_ops against FLA's autotuned kernels at the GDN layer's sizes, on one GPU.

A measurement script, not a test (pytest does not collect it). On a GPU node with FLA:

    PYTHONPATH=/tmp/site:$PWD/runtime python3 tools/gpu/triton_ops_bench.py [--tokens 4096 32768]
        [--fresh-triton-cache]

For each token count T: q/k l2norm on [1, T, 16, 128] (the 16-key-head layer), gated RMSNorm
on [T*32, 128] with its gate (32 value heads), causal conv1d + SiLU on [1, T, 8192] (q, k, v of
16/32 heads of 128), W=4, packed as a few sequences. Columns: device time (median of
triton.testing.do_bench, L2 flushed between calls) of the forward and of forward+backward;
the host time of one forward call (no sync, 200 calls); the first call of each (compile,
and for FLA autotuning) in this process; parity, the max over outputs and gradients of
max |x - ref| / max |ref| against a float64 torch reference. The last line is JSON.
--fresh-triton-cache points TRITON_CACHE_DIR at an empty directory first, so first calls
show cold compiles; without it, they show what a warm node's later processes see.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--tokens", type=int, nargs="+", default=[4096, 32768])
parser.add_argument("--fresh-triton-cache", action="store_true")
parser.add_argument("--no-fla", action="store_true", help="time slime_flashqla.triton_ops only")
ARGS = parser.parse_args()
if ARGS.fresh_triton_cache:
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="triton-cache-")

import torch  # noqa: E402
import triton.testing  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from runtime.triton_ops.references import (  # noqa: E402
    causal_conv1d_silu64,
    cu_seqlens_of,
    l2norm64,
    rel_error,
    rms_norm_gated64,
)

from slime_flashqla import triton_ops  # noqa: E402

DEV, DTYPE, EPS = "cuda", torch.bfloat16, 1e-6
KEY_HEADS, VALUE_HEADS, HEAD_DIM, WIDTH = 16, 32, 128, 4
CONV_DIM = 2 * KEY_HEADS * HEAD_DIM + VALUE_HEADS * HEAD_DIM  # 8192


def fla_ops():
    """FLA's three kernels' entry points, or None with --no-fla (imported here only)."""
    if ARGS.no_fla:
        return None
    from fla.modules.causal_conv1d.ops import causal_conv1d
    from fla.modules.norm.fused_norm_gate import rms_norm_gated
    from fla.modules.norm.l2norm import l2norm_bwd, l2norm_fwd

    return {
        "l2norm": (l2norm_fwd, l2norm_bwd),
        "rms_norm_gated": lambda x, g, w: rms_norm_gated(x, g, w, None, activation="swish", eps=EPS),
        "conv": lambda x, w, cu: causal_conv1d(x, weight=w.squeeze(1), bias=None, activation="silu", cu_seqlens=cu)[0],
    }


def lengths_of(tokens: int) -> list[int]:
    """A few packed sequences, one shorter than the conv width: [1, T/8 - 1, 3T/8, T/2]."""
    return [1, tokens // 8 - 1, 3 * tokens // 8, tokens - tokens // 2]


def first_call_s(fn) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - start


def host_us(fn, calls: int = 200, reps: int = 5) -> float:
    """Median host time of one call, not synchronising inside a repeat."""
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        out.append((time.perf_counter() - start) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(out)


def measure(fwd, fwd_bwd, parity) -> dict:
    """First-call, device and host times of one implementation, and its parity."""
    first = first_call_s(fwd_bwd)  # compiles (and autotunes) forward and backward
    with torch.no_grad():
        fwd_ms = triton.testing.do_bench(fwd)
        fwd_host = host_us(fwd)
    return {
        "first_call_s": round(first, 2),
        "fwd_ms": round(fwd_ms, 4),
        "fwdbwd_ms": round(triton.testing.do_bench(fwd_bwd), 4),
        "fwd_host_us": round(fwd_host, 1),
        "parity": parity(),
    }


def worst(pairs) -> float:
    return float(f"{max(rel_error(ours, ref) for ours, ref in pairs):.3g}")


def bench_l2norm(tokens, impl, gen):
    fwd_fn, bwd_fn = impl
    x = torch.randn(1, tokens, KEY_HEADS, HEAD_DIM, device=DEV, dtype=DTYPE, generator=gen)
    dy = torch.randn_like(x)

    def fwd():
        return fwd_fn(x)

    def fwd_bwd():
        y, rstd = fwd_fn(x)
        return bwd_fn(y, rstd, dy)

    def parity():
        x64 = x.double().requires_grad_()
        y64 = l2norm64(x64, EPS)
        (dx64,) = torch.autograd.grad(y64, x64, dy.double())
        return worst([(fwd()[0], y64), (fwd_bwd(), dx64)])

    return measure(fwd, fwd_bwd, parity)


def bench_rms_norm_gated(tokens, impl, gen):
    rows = tokens * VALUE_HEADS
    x = torch.randn(rows, HEAD_DIM, device=DEV, dtype=DTYPE, generator=gen).requires_grad_()
    g = torch.randn(rows, HEAD_DIM, device=DEV, dtype=DTYPE, generator=gen).requires_grad_()
    w = (1 + 0.3 * torch.randn(HEAD_DIM, device=DEV, generator=gen)).to(DTYPE).requires_grad_()
    dy = torch.randn_like(x)

    def fwd():
        return impl(x, g, w)

    def fwd_bwd():
        return torch.autograd.grad(impl(x, g, w), (x, g, w), dy)

    def parity():
        leaves = [t.detach().double().requires_grad_() for t in (x, g, w)]
        y64 = rms_norm_gated64(*leaves, EPS)
        grads64 = torch.autograd.grad(y64, leaves, dy.double())
        with torch.no_grad():
            y = fwd()
        return worst([(y, y64), *zip(fwd_bwd(), grads64, strict=True)])

    return measure(fwd, fwd_bwd, parity)


def bench_conv(tokens, impl, gen):
    lengths = lengths_of(tokens)
    cu = cu_seqlens_of(lengths, device=DEV)
    x = torch.randn(1, tokens, CONV_DIM, device=DEV, dtype=DTYPE, generator=gen).requires_grad_()
    w = (torch.randn(CONV_DIM, 1, WIDTH, device=DEV, generator=gen) / 2).to(DTYPE).requires_grad_()
    dy = torch.randn_like(x)

    def fwd():
        return impl(x, w, cu)

    def fwd_bwd():
        return torch.autograd.grad(impl(x, w, cu), (x, w), dy)

    def parity():
        x64, w64 = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
        y64 = causal_conv1d_silu64(x64, w64, lengths)
        grads64 = torch.autograd.grad(y64, (x64, w64), dy.double())
        with torch.no_grad():
            y = fwd()
        return worst([(y, y64), *zip(fwd_bwd(), grads64, strict=True)])

    return measure(fwd, fwd_bwd, parity)


OURS = {
    "l2norm": (triton_ops.l2norm_fwd, triton_ops.l2norm_bwd),
    "rms_norm_gated": lambda x, g, w: triton_ops.rms_norm_gated(x, g, w, EPS),
    "conv": triton_ops.causal_conv1d_silu,
}
BENCHES = {"l2norm": bench_l2norm, "rms_norm_gated": bench_rms_norm_gated, "conv": bench_conv}
SHAPES = {
    "l2norm": "[1,T,16,128]",
    "rms_norm_gated": "[T*32,128]+gate",
    "conv": f"[1,T,{CONV_DIM}] W={WIDTH} varlen",
}


def main() -> None:
    fla = fla_ops()
    results = {}
    for tokens in ARGS.tokens:
        for op, bench in BENCHES.items():
            impls = {"ours": OURS[op]} if fla is None else {"ours": OURS[op], "fla": fla[op]}
            for name, impl in impls.items():
                gen = torch.Generator(DEV).manual_seed(tokens)  # the same inputs for both
                try:
                    result = bench(tokens, impl, gen)
                except Exception as exc:  # one failing implementation must not lose the others' figures
                    result = {"error": f"{type(exc).__name__}: {exc}"[:300]}
                results.setdefault(str(tokens), {}).setdefault(op, {})[name] = result
                torch.cuda.empty_cache()
    header = f"{'T':>6} {'op':<16} {'shape':<26} {'impl':<5} {'first s':>8} {'fwd ms':>8} {'f+b ms':>8} "
    print(header + f"{'host us':>8} {'parity':>9}")
    for tokens, ops in results.items():
        for op, impls in ops.items():
            for name, r in impls.items():
                if "error" in r:
                    print(f"{tokens:>6} {op:<16} {SHAPES[op]:<26} {name:<5} FAILED {r['error']}")
                    continue
                print(
                    f"{tokens:>6} {op:<16} {SHAPES[op]:<26} {name:<5} {r['first_call_s']:>8.2f} {r['fwd_ms']:>8.4f} "
                    f"{r['fwdbwd_ms']:>8.4f} {r['fwd_host_us']:>8.1f} {r['parity']:>9.2e}"
                )
            if "fla" in impls and not any("error" in r for r in impls.values()):
                speed = {k: impls["fla"][k] / impls["ours"][k] for k in ("fwd_ms", "fwdbwd_ms")}
                ratio = f"{speed['fwd_ms']:>8.2f} {speed['fwdbwd_ms']:>8.2f}"
                print(f"{'':>6} {'':<16} {'fla/ours (time ratio)':<26} {'':<5} {'':>8} {ratio}")
    meta = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "dtype": str(DTYPE),
        "fresh_triton_cache": ARGS.fresh_triton_cache,
    }
    print("TRITON_OPS_BENCH " + json.dumps({"meta": meta, "results": results}))


if __name__ == "__main__":
    main()
