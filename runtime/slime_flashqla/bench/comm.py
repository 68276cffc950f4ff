"""Latency of torch.distributed ops unwrapped vs under each comm-guard policy, in one run.

On a GPU node:  torchrun --nproc-per-node 2 -m slime_flashqla.bench.comm --backend nccl --json comm.json
On a CPU box:   python -m slime_flashqla.bench.comm --backend gloo --nproc 2 --json comm.json
(or `slime-flashqla bench comm ...`).  Rank 0 prints the tables (rich, or --plain text) and writes
the JSON (--json) and the tables as Markdown (--markdown).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import socket
import statistics
import sys
import tempfile
import time
import warnings
from datetime import UTC, datetime
from pathlib import Path

from slime_flashqla.bench.options import output_paths, write_output
from slime_flashqla.errors import UserError

VARIANTS = ("unwrapped", "always", "whitelist", "first-use", "off")
# The default policy with the ProcessGroup methods wrapped too (`install(methods=True)`): a
# second wrapper on the path of every module-level call, timed to show what it costs.
WITH_METHODS = "first-use+methods"
# The unwrapped call timed a second time, as a variant of its own: its ratio to the first
# (an A/A comparison) is the harness's resolution, below which no difference is real.
AGAIN = "unwrapped again"
TIMED = (*VARIANTS, WITH_METHODS, AGAIN)
MODES = ("latency", "back-to-back")
OPS = (
    "all_reduce",
    "broadcast",
    "all_gather_into_tensor",
    "reduce_scatter_tensor",
    "all_to_all_single",
    "barrier",
    "isend+irecv",
)
SIZE_FREE_OPS = frozenset({"barrier"})
DEFAULT_SIZES = (4 * 1024, 64 * 1024 * 1024)
# Calls per timed block (small, large messages) and rounds.  gloo on a small CPU box takes
# ~0.1 s per 64 MB collective: fewer large iterations there.
DEFAULT_ITERS = {"nccl": (50, 10), "gloo": (20, 2)}
DEFAULT_ROUNDS = {"nccl": 40, "gloo": 5}
# What Gloo prints on every rank once its connections are up (torch 2.8): not a result, not an error.
GLOO_CHATTER = re.compile(rb"^\[Gloo\] Rank \d+ is connected to \d+ peer ranks\.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the benchmark's options to parser."""
    parser.add_argument("--backend", choices=("nccl", "gloo"), help="default: nccl with CUDA, else gloo")
    parser.add_argument("--json", metavar="PATH", help="write all numbers (rank 0) to this JSON file")
    parser.add_argument("--markdown", metavar="PATH", help="write the tables (rank 0) as Markdown to this file")
    parser.add_argument("--plain", action="store_true", help="plain-text tables even with rich")
    parser.add_argument("--nproc", type=int, default=2, help="ranks to start here when not under torchrun (default 2)")
    parser.add_argument(
        "--ops", nargs="+", choices=OPS, default=list(OPS), metavar="OP", help=f"{', '.join(OPS)} (default all)"
    )
    parser.add_argument(
        "--sizes",
        nargs="+",
        type=_size,
        default=list(DEFAULT_SIZES),
        help="message sizes, e.g. 4K 64M (default 4K 64M)",
    )
    parser.add_argument("--rounds", type=int, help="interleaved rounds over the variants (default: nccl 40, gloo 5)")
    parser.add_argument(
        "--iters-small", type=int, help="calls per timed block for sizes < 1 MiB (default: nccl 50, gloo 20)"
    )
    parser.add_argument(
        "--iters-large", type=int, help="calls per timed block for sizes >= 1 MiB (default: nccl 10, gloo 2)"
    )
    parser.add_argument("--warmup", type=int, default=5, help="untimed calls before each timed block (default 5)")


def _size(text: str) -> int:
    """Parse 4096, 4K, 64M, 1G (binary multiples) into bytes."""
    units = {"K": 1024, "M": 1024**2, "G": 1024**3}
    text = text.strip().upper().removesuffix("B").removesuffix("I")
    try:
        value = int(float(text[:-1]) * units[text[-1]]) if text and text[-1] in units else int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"size {text!r}: use bytes or a K/M/G suffix, e.g. 4K, 64M") from None
    if value < 4 or value % 4:
        raise argparse.ArgumentTypeError(f"size {text!r}: must be a positive multiple of 4 bytes (float32)")
    return value


def _human(nbytes: int) -> str:
    """4096 -> '4 KiB', 67108864 -> '64 MiB'."""
    for unit, factor in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if nbytes >= factor and nbytes % factor == 0:
            return f"{nbytes // factor} {unit}"
    return f"{nbytes} B"


def _make_call(op: str, nbytes: int, device, rank: int, world: int):
    """Return a zero-argument function that issues op once on preallocated buffers (no wait for completion)."""
    import torch
    import torch.distributed as dist

    n = max(nbytes // 4, world)
    n -= n % world  # the sizes are the full buffer (nccl-tests convention): divisible by world size
    full = torch.ones(n, device=device)
    part = torch.ones(n // world, device=device)
    # `dist.<op>` is looked up on every call, so the same function times the
    # original or the guard's wrapper, whichever is installed at the time.
    if op == "all_reduce":
        return lambda: dist.all_reduce(full)
    if op == "broadcast":
        return lambda: dist.broadcast(full, src=0)
    if op == "all_gather_into_tensor":
        return lambda: dist.all_gather_into_tensor(full, part)
    if op == "reduce_scatter_tensor":
        return lambda: dist.reduce_scatter_tensor(part, full)
    if op == "all_to_all_single":
        out = torch.empty_like(full)
        return lambda: dist.all_to_all_single(out, full)
    if op == "barrier":
        return lambda: dist.barrier()
    if op == "isend+irecv":
        peer = rank ^ 1  # pairs (0,1), (2,3)...: the even rank sends first, so the exchange is ordered
        inbox = torch.empty_like(full)

        def exchange():
            first, second = (dist.isend, dist.irecv) if rank % 2 == 0 else (dist.irecv, dist.isend)
            first(full if first is dist.isend else inbox, peer).wait()
            second(full if second is dist.isend else inbox, peer).wait()

        return exchange
    raise ValueError(f"unknown op {op!r}; choose from {', '.join(OPS)}")


def _set_variant(variant: str) -> None:
    """Install the guard with the variant's policy (default probe and threshold), or remove it."""
    from slime_flashqla import comm_guard

    if variant in ("unwrapped", AGAIN):
        comm_guard.uninstall()
    elif variant == WITH_METHODS:
        comm_guard.install("first-use", methods=True)
    else:
        comm_guard.install(variant)


def _time_op(call, sync, iters: int, warmup: int, rounds: int) -> tuple[dict, dict]:
    """Per mode and variant: microseconds per call of each timed block; variants interleaved and rotated by round.

    A block is `iters` calls timed together, which averages away the host clock's and the
    scheduler's jitter that a single 30 us call cannot escape.  `latency` waits for each
    call to finish before issuing the next (what a caller that synchronizes sees);
    `back-to-back` issues all of them and waits once (how a training step issues them).
    The order of the variants rotates every round so that none always runs first or last.
    """
    from slime_flashqla import comm_guard

    samples = {mode: {v: [] for v in TIMED} for mode in MODES}
    steady_stats: dict[str, dict] = {v: {} for v in TIMED}
    clock = time.perf_counter
    for r in range(rounds):
        order = TIMED[r % len(TIMED) :] + TIMED[: r % len(TIMED)]
        for variant in order:
            _set_variant(variant)
            for _ in range(warmup):
                call()
            sync()
            comm_guard.reset_stats()
            for mode in MODES:
                each = sync if mode == "latency" else (lambda: None)
                t0 = clock()
                for _ in range(iters):
                    call()
                    each()
                sync()
                samples[mode][variant].append((clock() - t0) * 1e6 / iters)
            for name, s in comm_guard.stats().items():
                acc = steady_stats[variant].setdefault(name, {"checked": 0, "skipped": 0, "cleared": 0})
                for k in acc:
                    acc[k] += s[k]
    comm_guard.uninstall()
    return samples, steady_stats


def wrapper_overhead(calls: int = 200_000, reps: int = 7) -> dict[str, float]:
    """Microseconds the guard's wrapper adds to a no-op call, per policy and path (probe not consulted)."""
    from slime_flashqla import comm_guard
    from slime_flashqla.comm_guard import guard

    def target(tensor, op=None, group=None, async_op=False):
        return None

    def per_call(fn, n: int = calls) -> float:
        # CPU time of this thread, not wall time: on a busy machine the time the process
        # spends descheduled would otherwise swamp sub-microsecond differences.  The
        # fastest repetition is the one least disturbed by cache and frequency effects.
        best = float("inf")
        for _ in range(reps):
            t0 = time.thread_time()
            for _ in range(n):
                fn(None)
            best = min(best, (time.thread_time() - t0) / n)
        return best * 1e6

    def wrapped(op_name: str, method: bool = False):
        key = guard._method_key(op_name) if method else guard._module_key(target, op_name)
        return guard._guarded(target, op_name, key, target, method)

    base = per_call(target)
    cases = {
        "off": ("off", wrapped("all_reduce")),
        "whitelist, skipped op": ("whitelist", wrapped("all_gather_into_tensor")),
        "first-use, steady state": ("first-use", wrapped("all_reduce")),
        "ProcessGroup method, off": ("off", wrapped("allreduce", method=True)),
    }
    out = {"bare call": base}
    for label, (policy, fn) in cases.items():
        comm_guard.install(policy)
        fn(None)  # first-use: the first call probes; time the steady state after it
        out[label] = per_call(fn) - base
    # `always` consults the default probe: on a GPU that is one torch.cuda.mem_get_info.
    comm_guard.install("always")
    out["always (probe consulted)"] = per_call(wrapped("all_reduce"), max(1, calls // 10)) - base
    comm_guard.uninstall()
    comm_guard.reset_stats()
    return out


def _percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile of values (q in 0..100)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def paired_ratio(variant: list[float], baseline: list[float]) -> float:
    """Median over rounds of variant / baseline, each pair timed in the same round."""
    # Pairing cancels what drifts from round to round (clocks, the host's other work, the
    # peer's pace), which a ratio of two medians taken over all rounds keeps as noise.
    return statistics.median(v / b for v, b in zip(variant, baseline, strict=True))


def run_rank(args: argparse.Namespace) -> dict | None:
    """Run the benchmark on this rank (process group already up); return the report on rank 0."""
    import torch
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    if "isend+irecv" in args.ops and world % 2:
        # every rank reaches this check, so all of them stop instead of one hanging in a collective
        raise SystemExit(f"bench comm: isend+irecv pairs ranks (0,1), (2,3)...; world size {world} is odd")
    backend = dist.get_backend()
    device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
    small_default, large_default = DEFAULT_ITERS.get(backend, DEFAULT_ITERS["gloo"])
    rounds = args.rounds or DEFAULT_ROUNDS.get(backend, DEFAULT_ROUNDS["gloo"])
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    load_start = os.getloadavg()[0]  # CPU contention from other work makes host-side timings noisy
    rows = []
    for op in args.ops:
        for nbytes in (0,) if op in SIZE_FREE_OPS else args.sizes:
            large = nbytes >= 1024**2
            iters = (args.iters_large or large_default) if large else (args.iters_small or small_default)
            warmup = min(args.warmup, max(1, iters // 2)) if large else args.warmup
            call = _make_call(op, nbytes, device, rank, world)
            samples, steady = _time_op(call, sync, iters, warmup, rounds)
            rows.append({"op": op, "bytes": nbytes, "calls_per_block": iters, "samples": samples, "stats": steady})
            if rank == 0:
                label = f"{op} {_human(nbytes)}" if nbytes else op
                print(f"  {label}: done", file=sys.stderr, flush=True)
    # One number per (row, mode, variant): the slowest rank's median, so a straggler is not hidden.
    keys = [(i, mode, v) for i in range(len(rows)) for mode in MODES for v in TIMED]
    medians = torch.tensor(
        [statistics.median(rows[i]["samples"][mode][v]) for i, mode, v in keys], dtype=torch.float64, device=device
    )
    dist.all_reduce(medians, op=dist.ReduceOp.MAX)
    # Per rank the paired ratio of each variant to the unwrapped call; the largest over ranks.
    paired_keys = [(i, mode, v) for i, mode, v in keys if v != "unwrapped"]
    paired = torch.tensor(
        [
            paired_ratio(rows[i]["samples"][mode][v], rows[i]["samples"][mode]["unwrapped"])
            for i, mode, v in paired_keys
        ],
        dtype=torch.float64,
        device=device,
    )
    dist.all_reduce(paired, op=dist.ReduceOp.MAX)
    overhead = wrapper_overhead() if rank == 0 else None
    if rank != 0:
        return None
    for r in rows:
        r["median_us"] = {mode: {} for mode in MODES}
        r["rank0_p90_us"] = {mode: {v: _percentile(r["samples"][mode][v], 90) for v in TIMED} for mode in MODES}
        del r["samples"]
    for (i, mode, v), us in zip(keys, medians.tolist(), strict=True):
        rows[i]["median_us"][mode][v] = us
    for r in rows:
        r["ratio"] = {mode: {} for mode in MODES}
        r["ratio_of_medians"] = {
            mode: {v: r["median_us"][mode][v] / r["median_us"][mode]["unwrapped"] for v in TIMED if v != "unwrapped"}
            for mode in MODES
        }
    for (i, mode, v), ratio in zip(paired_keys, paired.tolist(), strict=True):
        rows[i]["ratio"][mode][v] = ratio
    return {
        "meta": {
            "date_utc": datetime.now(UTC).strftime("%Y-%m-%d %H:%M"),
            "backend": backend,
            "world_size": world,
            "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
            "cpu_count": os.cpu_count(),
            "loadavg_1m": {"start": load_start, "end": os.getloadavg()[0]},
            "torch": torch.__version__,
            "python": platform.python_version(),
            "command": " ".join(sys.orig_argv),
            "rounds": rounds,
            "warmup": args.warmup,
            "timing": (
                "perf_counter around a block of calls, per call; median_us: median over rounds, slowest rank; "
                "ratio: median over rounds of the variant's block / the unwrapped block of the same round, "
                "largest over ranks; ratio_of_medians: median_us / median_us unwrapped; "
                "latency: each call waited for (CUDA sync / work wait); back-to-back: one wait per block"
            ),
            "probe": "default: torch.cuda.mem_get_info() when CUDA is initialized, else None",
        },
        "rows": rows,
        "wrapper_overhead_us": overhead,
    }


def table_cells(report: dict, mode: str) -> tuple[list[str], list[list[str]]]:
    """Headers and cells of one timing mode's table: a row per op and size, a ratio column per variant."""
    shown = [v for v in TIMED if v != "unwrapped"]
    headers = ["op", "size", "unwrapped (us)", *(f"{v} (x)" for v in shown)]
    cells = [
        [
            r["op"],
            _human(r["bytes"]) if r["bytes"] else "-",
            f"{r['median_us'][mode]['unwrapped']:.1f}",
            *(f"{r['ratio'][mode][v]:.3f}" for v in shown),
        ]
        for r in report["rows"]
    ]
    return headers, cells


RATIO_NOTE = "(x): median over rounds of each variant's time / the unwrapped time of the same round"


def format_table(report: dict) -> str:
    """Render the report as Markdown: per timing mode one row per op and size, one column per variant."""
    from slime_flashqla.bench.report import markdown_table

    lines = [RATIO_NOTE, ""]
    for mode in MODES:
        lines += [f"{mode}:", "", *markdown_table(*table_cells(report, mode)), ""]
    overhead = [[label, f"{us:.3f}"] for label, us in report["wrapper_overhead_us"].items()]
    lines += markdown_table(["wrapper alone", "us per call"], overhead)
    return "\n".join(lines)


def print_report(report: dict, plain: bool) -> None:
    """Print the tables as the other benchmarks do: rich tables, or aligned plain text."""
    from slime_flashqla.terminal import print_table, table_console

    console = table_console(plain)
    for mode in MODES:
        print_table(console, f"{mode} ({report['meta']['backend']}, {report['meta']['world_size']} ranks)",
                    *table_cells(report, mode))  # fmt: skip
    print(RATIO_NOTE)
    overhead = [[label, f"{us:.3f}"] for label, us in report["wrapper_overhead_us"].items()]
    print_table(console, "the guard's wrapper alone", ("path", "us per call"), overhead)


@contextlib.contextmanager
def without_gloo_chatter():
    """Hold back what the process prints on fds 1 and 2 meanwhile, then let through all but Gloo's connect lines."""
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    with tempfile.TemporaryFile() as held:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd in saved:
            os.dup2(held.fileno(), fd)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            for fd, copy in saved.items():
                os.dup2(copy, fd)
                os.close(copy)
            held.seek(0)
            kept = [line for line in held.read().splitlines(keepends=True) if not GLOO_CHATTER.match(line)]
            # Both streams were one file meanwhile: what is kept goes to stderr, where diagnostics belong.
            os.write(2, b"".join(kept))


def _worker(local_rank: int, args: argparse.Namespace, world: int) -> None:
    """Entry point of a rank started by --nproc (not under torchrun)."""
    os.environ.update({"RANK": str(local_rank), "LOCAL_RANK": str(local_rank), "WORLD_SIZE": str(world)})
    _run_initialized(args)


def _run_initialized(args: argparse.Namespace) -> None:
    """Init the process group from the environment, benchmark, report on rank 0, tear down."""
    import torch
    import torch.distributed as dist

    if args.backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    with without_gloo_chatter():
        dist.init_process_group(args.backend)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # all_gather_into_tensor's deprecation notice
            report = run_rank(args)
        if report is not None:
            print_report(report, getattr(args, "plain", False))
            if args.json:
                write_output(Path(args.json), json.dumps(report, indent=1) + "\n")
                print(f"wrote {args.json}")
            if getattr(args, "markdown", None):
                write_output(Path(args.markdown), format_table(report) + "\n")
                print(f"wrote {args.markdown}")
        dist.barrier()
    finally:
        dist.destroy_process_group()


def run(args: argparse.Namespace) -> int:
    """Benchmark under torchrun's environment, or start --nproc local ranks."""
    import torch

    if args.backend is None:
        args.backend = "nccl" if torch.cuda.is_available() else "gloo"
    if args.backend == "nccl" and not torch.cuda.is_available():
        raise UserError("--backend nccl needs CUDA GPUs; use --backend gloo on this machine")
    counts = [1 if n is None else n for n in (args.rounds, args.iters_small, args.iters_large)]
    if min(counts) < 1 or args.warmup < 0:
        raise UserError("--rounds and --iters-* must be >= 1, --warmup >= 0")
    # Where the results go is checked before any rank starts, as every benchmark checks it.
    for option, path in output_paths(args, UserError, ("json", "markdown")).items():
        setattr(args, option, str(path))
    if "WORLD_SIZE" in os.environ:  # torchrun (or another launcher) started us
        _run_initialized(args)
        return 0
    if args.nproc < 2:
        raise UserError("--nproc must be >= 2 (a collective needs peers)")
    if args.backend == "nccl" and torch.cuda.device_count() < args.nproc:
        raise UserError(f"--nproc {args.nproc} > {torch.cuda.device_count()} visible GPUs")
    with socket.socket() as s:  # a free port for the rendezvous; the tiny race is acceptable here
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    import torch.multiprocessing as mp

    # CUDA cannot be used in a forked child; gloo ranks start faster by fork.
    method = "spawn" if args.backend == "nccl" else "fork"
    mp.start_processes(_worker, args=(args, args.nproc), nprocs=args.nproc, start_method=method)
    return 0


if __name__ == "__main__":  # torchrun's ranks: through the CLI, so that bad input is one line there too
    from slime_flashqla.cli import main as cli_main

    sys.exit(cli_main(["bench", "comm", *sys.argv[1:]]))
