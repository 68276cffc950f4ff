"""This package's GDN layers against slime's own layer classes and Megatron-core's GatedDeltaNet, same weights, one GPU.

A measurement script, not a test (pytest does not collect it). On a GPU node with FLA and flash-qla:

    PYTHONPATH=/tmp/site:$PWD/runtime python3 tools/gpu/layer_compare.py [--slime-source DIR] \
        [--variants ours,slime-flashqla,slime-fla,megatron-core] [--models qwen3-next,qwen3.5] \
        [--packs 8192+24576,...] [--profile 8192+24576] [--no-grad] [--json F]

Variants: `ours` (this package's layer, `auto` backend), `slime-flashqla` (slime's layer with
`--qwen-gdn-backend flashqla`), `slime-fla` (slime's default, FLA's own kernels: FLA_FLASH_QLA=0
is set for the whole process), `megatron-core` (Megatron-core's own GatedDeltaNet, megatron-core
>= 0.19 on Python >= 3.12, FLA's conv and kernel; slime_flashqla.bench.megatron_layer: TE's linears
from Megatron's spec where TE is installed, else Megatron's own, printed; skipped in one line where
megatron-core does not import). slime's layers are built as slime builds them, cast to bf16 as
Megatron's Float16Module does, and loaded with our layer's state dict by name; Megatron's gets the
same weights mapped to its names and layout (bench.megatron_weights), and is refused before any
timing when its output on a fixed pack differs from ours by more than bf16 rounding. Before timing,
each peer's output and input gradient are compared with ours on the pack (with Megatron's spec's
fused input RMSNorm, against ours after a unit-gamma RMSNorm). Timing:
forward+backward of one fixed output gradient, CUDA events around each step, rounds of steps
alternating between the variants after warm-up, median; peak memory: max_memory_allocated during
a step minus what was allocated before it. --no-grad times the forward alone under torch.no_grad
(an RL step's log-prob passes) instead. --profile adds a torch.profiler table of GPU time by
kernel for each variant at that pack. The last line is JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

os.environ.setdefault("FLA_FLASH_QLA", "0")  # slime-fla means FLA's own kernels, read once at FLA's import

import torch

from slime_flashqla.bench.megatron_layer import megatron_layer_problem, megatron_note, parity_reference
from slime_flashqla.bench.timing import gpu_ms_by_kernel, kernel_table_lines
from slime_flashqla.bench.variants import megatron_peer
from slime_flashqla.integrations.slime.source import slime_gdn_layer_class
from slime_flashqla.layers import Qwen3_5GatedDeltaNet, Qwen3NextGatedDeltaNet, init_like_checkpoint
from slime_flashqla.workload.models import gdn_layer_config
from slime_flashqla.workload.setup import LayerSetup

OURS = {"qwen3-next": Qwen3NextGatedDeltaNet, "qwen3.5": Qwen3_5GatedDeltaNet}
DEFAULT_PACKS = "8192+24576,3000+2500+1800+1200+700+400+100,256x64,16384x2"
MEGATRON = "megatron-core"
VARIANTS = ("ours", "slime-flashqla", "slime-fla", MEGATRON)


def lengths_of(pack: str) -> list[int]:
    if "x" in pack:
        length, count = pack.split("x")
        return [int(length)] * int(count)
    return [int(p) for p in pack.split("+")]


def build(model, variant, cfg, source, seed=0):
    torch.manual_seed(seed)
    ours = OURS[model](cfg, backend="auto")
    init_like_checkpoint(ours)
    ours = ours.cuda().to(torch.bfloat16)
    if variant == "ours":
        return ours
    if variant == MEGATRON:
        setup = LayerSetup("cuda", "bfloat16", cfg.linear_key_head_dim, cfg.hidden_size, seed, layer_model=model)
        return megatron_peer(ours, setup)  # parity-gated on a fixed pack before any timing
    cls = slime_gdn_layer_class(model, source)
    backend = variant.removeprefix("slime-")
    theirs = cls(cfg, layer_idx=0, args=SimpleNamespace(qwen_gdn_backend=backend)).cuda().to(torch.bfloat16)
    theirs.load_state_dict(ours.state_dict(), strict=True)
    return theirs


def step_fn(layer, x, cu, dy, no_grad=False):
    params = list(layer.parameters())

    if no_grad:

        def forward():
            with torch.no_grad():
                layer(x, cu_seqlens=cu)

        return forward

    def step():
        out = layer(x, cu_seqlens=cu)
        out.backward(dy)
        x.grad = None
        for p in params:
            p.grad = None

    return step


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slime-source", help="slime's checkout (needed by the slime-* variants)")
    parser.add_argument("--models", default="qwen3-next,qwen3.5")
    parser.add_argument("--variants", default=f"ours,slime-flashqla,slime-fla,{MEGATRON}")
    parser.add_argument("--packs", default=DEFAULT_PACKS)
    parser.add_argument("--heads", default="16/32")
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=5, help="steps per variant per round")
    parser.add_argument("--profile", default="", help="pack to profile each variant at")
    parser.add_argument("--no-grad", action="store_true", help="time the forward under torch.no_grad instead")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    hk, hv = (int(h) for h in args.heads.split("/"))
    variants = args.variants.split(",")
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown or "ours" not in variants:
        parser.error(f"--variants: give ours and any of {', '.join(VARIANTS[1:])}; unknown: {', '.join(unknown)}")
    if not args.slime_source and any(v.startswith("slime-") for v in variants):
        parser.error("the slime-* variants need --slime-source DIR (a slime checkout)")
    cfg = SimpleNamespace(**gdn_layer_config(hk, hv, hidden_size=args.hidden), dtype=torch.bfloat16)
    report = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": [], "profiles": {}}
    if MEGATRON in variants:
        problem = megatron_layer_problem("cuda")
        if problem:
            print(f"{MEGATRON}: skipped: {problem}", flush=True)
            variants.remove(MEGATRON)
            report["skipped"] = {MEGATRON: problem}
        else:
            report[MEGATRON] = megatron_note()
            print(f"{MEGATRON}: {report[MEGATRON]}", flush=True)
    for model in args.models.split(","):
        layers = {v: build(model, v, cfg, args.slime_source) for v in variants}
        # Megatron's spec fuses the decoder layer's input RMSNorm into its in_proj (with TE): its output
        # must match ours behind a unit-gamma RMSNorm, run beside it.
        references = {}
        if MEGATRON in layers and parity_reference(layers[MEGATRON], layers["ours"]) is not layers["ours"]:
            references[MEGATRON] = parity_reference(layers[MEGATRON], layers["ours"])
        for pack in args.packs.split(","):
            lengths = lengths_of(pack)
            tokens = sum(lengths)
            gen = torch.Generator(device="cuda").manual_seed(1)
            x = torch.randn(1, tokens, args.hidden, device="cuda", generator=gen).to(torch.bfloat16).requires_grad_()
            dy = torch.randn(1, tokens, args.hidden, device="cuda", generator=gen).to(torch.bfloat16)
            offsets = [0]
            for n in lengths:
                offsets.append(offsets[-1] + n)
            cu = torch.tensor(offsets, dtype=torch.int32, device="cuda")
            outs = {}
            for v, layer in [*layers.items(), *((f"{v} reference", r) for v, r in references.items())]:
                out = layer(x, cu_seqlens=cu)
                out.backward(dy)
                outs[v] = (out.detach(), x.grad.detach().clone())
                x.grad = None
                layer.zero_grad(set_to_none=True)
            ref = {v: outs.get(f"{v} reference", outs["ours"]) for v in variants}
            parity = {v: {"out": rel(outs[v][0], ref[v][0]), "dx": rel(outs[v][1], ref[v][1])}
                      for v in variants if v != "ours"}  # fmt: skip
            steps = {v: step_fn(layer, x, cu, dy, args.no_grad) for v, layer in layers.items()}
            for step in steps.values():
                for _ in range(args.warmup):
                    step()
            times, peaks = defaultdict(list), defaultdict(list)
            for _ in range(args.rounds):
                for v, step in steps.items():
                    for _ in range(args.steps):
                        torch.cuda.synchronize()
                        base = torch.cuda.memory_allocated()
                        torch.cuda.reset_peak_memory_stats()
                        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                        start.record()
                        step()
                        end.record()
                        torch.cuda.synchronize()
                        times[v].append(start.elapsed_time(end))
                        peaks[v].append((torch.cuda.max_memory_allocated() - base) / 2**20)
            row = {"model": model, "pack": pack, "tokens": tokens, "sequences": len(lengths), "parity": parity}
            for v in variants:
                row[v] = {"ms": statistics.median(times[v]), "peak_mib": max(peaks[v])}
            for v in variants:
                if v != "ours":
                    row[f"ours/{v}"] = row["ours"]["ms"] / row[v]["ms"]
            report["rows"].append(row)
            cells = " | ".join(f"{v} {row[v]['ms']:.2f} ms {row[v]['peak_mib']:.0f} MiB" for v in variants)
            ratios = " ".join(f"ours/{v} {row[f'ours/{v}']:.3f}" for v in variants if v != "ours")
            print(f"{model:10} {pack:34} {cells} | {ratios} | parity {parity}", flush=True)
            if pack == args.profile:
                for v, step in steps.items():
                    report["profiles"][f"{model} {v} {pack}"] = table = gpu_ms_by_kernel(step)
                    print(f"-- profile {model} {v} {pack}: {table['total_ms']:.2f} GPU ms/step", flush=True)
                    print("\n".join(kernel_table_lines(table)), flush=True)
            del x, dy, outs, steps
        del layers
        torch.cuda.empty_cache()
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    print(json.dumps({"device": report["device"], "rows": len(report["rows"])}))


if __name__ == "__main__":
    sys.exit(main())
