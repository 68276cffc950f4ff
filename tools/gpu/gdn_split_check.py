"""GDN layers split over TP x CP ranks on one GPU: parity with the real kernels, and each rank's cost.

A measurement script, not a test (pytest does not collect it). On a GPU node with flash-qla:

    PYTHONPATH=/tmp/site:$PWD/runtime python3 tools/gpu/gdn_split_check.py parity [--json F]
    PYTHONPATH=/tmp/site:$PWD/runtime python3 tools/gpu/gdn_split_check.py cost [--tokens 65536,262144] \
        [--splits 1x2,2x1] [--profile] [--json F]
    PYTHONPATH=/tmp/site:$PWD/runtime python3 tools/gpu/gdn_split_check.py host --tokens 65536 --splits 8x1,1x8

parity: the ranks as processes on one GPU, gloo carrying the CUDA tensors through host memory,
each layer built whole and split with `compute_on_share` (as slime's Attention does), bf16 on
`--backend` (flashqla). Each rank's output, input gradient and parameter gradients (summed over
the ranks as Megatron's reductions do) against the whole layer in float32 on the `torch`
reference, beside the unsplit bf16 layer's own error against the same reference.

cost: one process standing for rank 0 of a TP x CP world whose collectives are no-ops (torch's
fake process group): what that rank computes and holds, without communication. Forward+backward
time, median of --iters, two ways: queued back to back with CUDA events around each step (the
host's pace shows where it is slower than the GPU), and with the host held ahead of the device
(bench.timing.device_samples: the GPU's own time, beside the host's time to queue one step).
Activation memory (allocated after the forward, less the input, the output and what was
allocated before) in a pass of its own. Each against the unsplit layer at the same pack, as a
ratio to be read against 1/(TP x CP); --profile adds each row's GPU time by kernel
(torch.profiler).

host: the same rows, each a cProfile of --iters steps queued behind a held device: the host's time per step by
function, to find what makes a small share host-bound. The last line of each mode is JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from types import SimpleNamespace

import torch

from slime_flashqla.bench.timing import device_samples, gpu_ms_by_kernel, kernel_table_lines, samples, warm
from slime_flashqla.layers import Qwen3_5GatedDeltaNet, Qwen3NextGatedDeltaNet, init_like_checkpoint
from slime_flashqla.layers.context_parallel import zigzag_layout
from slime_flashqla.workload.models import gdn_layer_config

CLASSES = {"qwen3-next": Qwen3NextGatedDeltaNet, "qwen3.5": Qwen3_5GatedDeltaNet}
SHAPES = {"qwen3-next": (16, 32, 2048), "qwen3.5": (16, 64, 4096)}  # Qwen3-Next-80B, Qwen3.5-397B at TP 1
SPLITS = [(2, 1), (1, 2), (4, 1), (2, 2), (1, 4), (8, 1), (2, 4), (1, 8)]
# (TP, CP, sequence parallel) of the parity runs, the most telling first
PARITY_SPLITS = [(1, 2, False), (2, 2, True), (2, 1, False), (2, 2, False), (1, 4, False), (2, 1, True)]


def config(model: str, dtype, heads=None, hidden=None):
    hk, hv, h = SHAPES[model]
    hk, hv = heads or (hk, hv)
    return SimpleNamespace(**gdn_layer_config(hk, hv, hidden_size=hidden or h), dtype=dtype)


def groups_of(tp, cp, rank):
    import torch.distributed as dist

    mine = {}
    for c in range(cp):
        group = dist.new_group([c * tp + t for t in range(tp)])
        if c == rank // tp:
            mine["tp"] = group
    for t in range(tp):
        group = dist.new_group([c * tp + t for c in range(cp)])
        if t == rank % tp:
            mine["cp"] = group
    return (mine["tp"] if tp > 1 else None), (mine["cp"] if cp > 1 else None)


def rel(a, b) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()


# ---- parity ---------------------------------------------------------------------------------


def _parity_rank(rank, world, store, model, tp, cp, sp, backend, lengths, queue):
    from datetime import timedelta

    import torch.distributed as dist

    torch.cuda.set_device(0)
    store = f"file://{store}"
    dist.init_process_group("gloo", init_method=store, rank=rank, world_size=world, timeout=timedelta(seconds=600))
    try:
        tp_group, cp_group = groups_of(tp, cp, rank)
        device = torch.device("cuda")
        torch.manual_seed(0)
        whole32 = CLASSES[model](config(model, torch.float32), backend="torch", preload_kernels=False).to(device)
        init_like_checkpoint(whole32)
        state = whole32.state_dict()
        whole16 = CLASSES[model](config(model, torch.bfloat16), backend=backend).to(device)
        whole16.load_state_dict(state)
        split = CLASSES[model](config(model, torch.bfloat16), backend=backend).to(device)
        split.load_state_dict(state)
        split.compute_on_share(tp_group=tp_group, cp_group=cp_group, sequence_parallel=sp)
        offsets = [0]
        for n in lengths:
            offsets.append(offsets[-1] + -(-n // (2 * cp)) * 2 * cp)
        cu = torch.tensor(offsets, dtype=torch.int32, device=device)
        gen = torch.Generator(device=device).manual_seed(1)
        hidden = SHAPES[model][2]
        x = torch.randn(1, offsets[-1], hidden, generator=gen, device=device)
        dy = torch.randn(1, offsets[-1], hidden, generator=gen, device=device)
        results = {}
        refs = {}
        for name, layer, dtype in (("ref", whole32, torch.float32), ("unsplit", whole16, torch.bfloat16)):
            xi = x.to(dtype).clone().requires_grad_()
            out = layer(xi, cu_seqlens=cu)
            out.backward(dy.to(dtype))
            refs[name] = (out, xi.grad, {n: p.grad for n, p in layer.named_parameters()})
        # This rank's rows of the pack: the CPU tests check the layout against a plain loop.
        local = offsets[-1] // cp
        rows = zigzag_layout(offsets, cp, device).zigzag[(rank // tp) * local : (rank // tp + 1) * local]

        def mine(t):
            t = t[:, rows]
            return t.chunk(tp, dim=1)[rank % tp] if sp else t

        xs = mine(x).detach().to(torch.bfloat16).requires_grad_()
        out = split(xs, cu_seqlens=cu)
        out.backward(mine(dy).to(torch.bfloat16))
        ref_out, ref_dx, ref_grads = refs["ref"]
        u_out, u_dx, u_grads = refs["unsplit"]
        results["split"] = {"out": rel(out, mine(ref_out)), "dx": rel(xs.grad, mine(ref_dx))}
        results["unsplit"] = {"out": rel(mine(u_out), mine(ref_out)), "dx": rel(mine(u_dx), mine(ref_dx))}
        for n, p in split.named_parameters():
            grad = p.grad.float()
            if cp_group is not None:
                dist.all_reduce(grad, group=cp_group)
            if getattr(p, "sequence_parallel", False):
                dist.all_reduce(grad, group=tp_group)
            results["split"][n] = rel(grad, ref_grads[n])
            results["unsplit"][n] = rel(u_grads[n], ref_grads[n])
        queue.put((rank, results))
    except BaseException as error:  # the parent prints it in its table
        queue.put((rank, f"{type(error).__name__}: {error}"))
    finally:
        dist.destroy_process_group()


def parity(args) -> list[dict]:
    import multiprocessing as mp
    import tempfile

    ctx = mp.get_context("spawn")
    rows = []
    lengths = [int(n) for n in args.lengths.split(",")]
    for model in args.models.split(","):
        for tp, cp, sp in PARITY_SPLITS[: args.parity_splits]:
            queue = ctx.Queue()
            store = tempfile.mktemp(prefix="gdn_split_store_")
            world = tp * cp
            procs = [
                ctx.Process(
                    target=_parity_rank, args=(r, world, store, model, tp, cp, sp, args.backend, lengths, queue)
                )
                for r in range(world)
            ]
            for p in procs:
                p.start()
            got = dict(queue.get(timeout=900) for _ in procs)
            for p in procs:
                p.join(timeout=30)
            errors = [v for v in got.values() if isinstance(v, str)]
            row = {"model": model, "tp": tp, "cp": cp, "sp": sp}
            if errors:
                row["error"] = errors[0]
            else:
                row["split_max"] = max(max(r["split"].values()) for r in got.values())
                row["unsplit_max"] = max(max(r["unsplit"].values()) for r in got.values())
                row["split_dx"] = max(r["split"]["dx"] for r in got.values())
                row["unsplit_dx"] = max(r["unsplit"]["dx"] for r in got.values())
            rows.append(row)
            print(json.dumps(row), flush=True)
    print(f"{'model':<11} {'TP':>3} {'CP':>3} {'SP':>3} {'split max err':>14} {'unsplit max err':>16}")
    for r in rows:
        tail = r.get("error") or f"{r['split_max']:14.2e} {r['unsplit_max']:16.2e}"
        print(f"{r['model']:<11} {r['tp']:>3} {r['cp']:>3} {int(r['sp']):>3} {tail}")
    return rows


# ---- cost -----------------------------------------------------------------------------------


def _step(layer, x, cu, dy):
    """One forward+backward of `layer` on a fresh leaf of `x`, its gradients dropped first (no accumulation kernels)."""

    def step():
        for param in layer.parameters():
            param.grad = None
        layer(x.detach().requires_grad_(), cu_seqlens=cu).backward(dy)

    return step


def _activation_bytes(layer, x, cu, dy) -> int:
    """What the forward leaves allocated for the backward (less the output), in a pass of its own."""
    xi = x.detach().requires_grad_()
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    out = layer(xi, cu_seqlens=cu)
    torch.cuda.synchronize()
    activation = torch.cuda.memory_allocated() - before - out.numel() * out.element_size()
    out.backward(dy)
    torch.cuda.synchronize()
    return activation


def _time_layer(layer, x, cu, dy, iters):
    """{ms: queued, device_ms and host_ms: host held ahead, activation_bytes} of one layer on one input.

    `ms` is what a rank sees when nothing else in its step gives the host a lead: the steps queued
    back to back, CUDA events around each. `device_ms` holds the device back behind a spin kernel
    until the host has queued every step (bench.timing.device_samples), so it is the GPU's own
    time, what a rank sees when the rest of its step keeps the host ahead; `host_ms` is the host's
    time to queue one step.
    """
    step = _step(layer, x, cu, dy)
    warm(step, x.device, 2)
    activation = _activation_bytes(layer, x, cu, dy)
    queued = samples(step, x.device, iters)
    ahead = device_samples(step, x.device, iters, host_guess_ms=statistics.median(queued))
    return {
        "ms": statistics.median(queued),
        "device_ms": statistics.median(ahead.device_ms),
        "host_ms": ahead.host_ms,
        "host_ahead": ahead.ahead,
        "activation_bytes": activation,
    }


def _cost_one(model, tokens, tp, cp, backend, iters, sequence, profile=False, host_profile=False):
    """One process standing for rank 0 of a TP x CP world (fake collectives): its time and activations."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    device = torch.device("cuda")
    if tp * cp > 1:
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=tp * cp)
    try:
        tp_group, cp_group = groups_of(tp, cp, 0) if tp * cp > 1 else (None, None)
        torch.manual_seed(0)
        layer = CLASSES[model](config(model, torch.bfloat16), backend=backend).to(device)
        init_like_checkpoint(layer)
        layer.compute_on_share(tp_group=tp_group, cp_group=cp_group)
        offsets = list(range(0, tokens + 1, sequence))
        cu = torch.tensor(offsets, dtype=torch.int32, device=device)
        local = tokens // cp
        x = torch.randn(1, local, SHAPES[model][2], device=device, dtype=torch.bfloat16)
        dy = torch.randn_like(x)
        if host_profile:
            return {"host_profile": _host_profile(_step(layer, x, cu, dy), iters)}
        row = _time_layer(layer, x, cu, dy, iters)
        if profile:
            row["profile"] = gpu_ms_by_kernel(_step(layer, x, cu, dy), top=18)
        return row
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _host_profile(step, iters: int, count: int = 28, hold_ms: float = 3000.0) -> dict:
    """The host's heaviest functions over `iters` steps queued behind a held device (cProfile).

    The device is held by a spin kernel for `hold_ms` first and the backward runs on this thread
    (autograd's device threads off), so a call that waits for the device (a host sync) shows as
    that wait in its own time, and torch's sync-debug warnings name the op and the Python line.
    """
    import cProfile
    import pstats
    import traceback
    import warnings

    from slime_flashqla.bench.timing import cprofile_rows, spin_kernel

    device = torch.device("cuda")
    warm(step, device, 2)
    syncs: dict[str, int] = {}

    def seen(message, category, filename, lineno, file=None, line=None):
        frames = [f for f in traceback.extract_stack()[:-1] if "warnings" not in f.filename]
        where = " <- ".join(f"{os.path.basename(f.filename)}:{f.lineno}({f.name})" for f in frames[-6:][::-1])
        key = f"{str(message).splitlines()[0][:80]} at {where}"
        syncs[key] = syncs.get(key, 0) + 1

    hold = spin_kernel(device, hold_ms)
    profiler = cProfile.Profile()
    mode = torch.cuda.get_sync_debug_mode()
    with torch.autograd.set_multithreading_enabled(False), warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = seen
        torch.cuda.synchronize()
        hold()
        torch.cuda.set_sync_debug_mode("warn")
        try:
            profiler.enable()
            for _ in range(iters):
                step()
        finally:
            profiler.disable()
            torch.cuda.set_sync_debug_mode(mode)
    torch.cuda.synchronize()
    stats = pstats.Stats(profiler).stats
    total = sum(own for _, _, own, _, _ in stats.values()) * 1e3 / iters
    rows = {order: cprofile_rows(stats, order, count, iters) for order in ("own", "cumulative")}
    return {"host_ms": total, "hold_ms": hold_ms, **rows, "syncs": syncs}


def _print_host_profile(label: str, found: dict) -> None:
    print(
        f"-- host profile {label}: {found['host_ms']:.2f} ms of host time per step (under cProfile, the device "
        f"held {found['hold_ms']:.0f} ms first: a host sync waits for it)"
    )
    for where, count in found["syncs"].items():
        print(f"   sync x{count}: {where}")
    for order in ("own", "cumulative"):
        print(f"   by {order} time (ms per step own, cumulative; calls per step; function):")
        for function, calls, own, cumulative in found[order]:
            print(f"   {own:8.3f} {cumulative:8.3f} {calls:7.1f}  {function}")


def cost(args) -> list[dict]:
    rows = []
    splits = [tuple(int(n) for n in s.split("x")) for s in args.splits.split(",")] if args.splits else SPLITS
    host = args.mode == "host"
    for model in args.models.split(","):
        for tokens in (int(t) for t in args.tokens.split(",")):

            def one(tp, cp, model=model, tokens=tokens):
                return _cost_one(
                    model, tokens, tp, cp, args.backend, args.iters, args.sequence, args.profile, host_profile=host
                )

            base = one(1, 1)
            for tp, cp in [(1, 1), *splits]:
                got = base if (tp, cp) == (1, 1) else one(tp, cp)
                if host:
                    _print_host_profile(f"{model} {tokens} tokens TP {tp} CP {cp}", got["host_profile"])
                    rows.append({"model": model, "tokens": tokens, "tp": tp, "cp": cp, **got})
                    continue
                row = {
                    "model": model, "tokens": tokens, "tp": tp, "cp": cp, **got, "time_ratio": got["ms"] / base["ms"],
                    "device_ratio": got["device_ms"] / base["device_ms"],
                    "memory_ratio": got["activation_bytes"] / base["activation_bytes"], "target": 1.15 / (tp * cp),
                }  # fmt: skip
                rows.append(row)
                print(json.dumps({k: v for k, v in row.items() if k != "profile"}), flush=True)
                if "profile" in row:
                    print("\n".join(kernel_table_lines(row["profile"])), flush=True)
    if host:
        return rows
    print(
        f"{'model':<11} {'tokens':>7} {'TP':>3} {'CP':>3} {'ms':>9} {'GPU ms':>8} {'host ms':>8} {'act GiB':>8} "
        f"{'time x':>7} {'GPU x':>7} {'mem x':>7} {'<=':>6}"
    )
    for r in rows:
        print(
            f"{r['model']:<11} {r['tokens']:>7} {r['tp']:>3} {r['cp']:>3} {r['ms']:9.2f} {r['device_ms']:8.2f} "
            f"{r['host_ms']:8.2f}{'' if r['host_ahead'] else '!'} {r['activation_bytes'] / 2**30:8.2f} "
            f"{r['time_ratio']:7.3f} {r['device_ratio']:7.3f} {r['memory_ratio']:7.3f} {r['target']:6.3f}"
        )
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="gdn_split_check.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=("parity", "cost", "host"))
    parser.add_argument("--models", default="qwen3-next,qwen3.5", help="(default: %(default)s)")
    parser.add_argument("--backend", default="flashqla", help="the split layers' kernel (default: %(default)s)")
    parser.add_argument("--lengths", default="3000,1000,2500,700,64,1", help="parity pack (default: %(default)s)")
    parser.add_argument("--tokens", default="65536,262144", help="cost packs' tokens (default: %(default)s)")
    parser.add_argument(
        "--sequence", type=int, default=16384, help="cost packs' sequence length (default: %(default)s)"
    )
    parser.add_argument("--splits", default="", help="cost: TPxCP splits, e.g. 1x2,2x1 (default: all eight)")
    parser.add_argument("--profile", action="store_true", help="cost: add each row's GPU ms by kernel (torch.profiler)")
    parser.add_argument("--iters", type=int, default=5, help="timed steps per cost row (default: %(default)s)")
    parser.add_argument("--parity-splits", type=int, default=len(PARITY_SPLITS), help="parity: the first N splits")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("gdn_split_check.py: needs a CUDA GPU (torch.cuda.is_available() is False)", file=sys.stderr)
        return 2
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    rows = parity(args) if args.mode == "parity" else cost(args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
