"""Latency of torch.distributed ops unwrapped vs under each comm-guard policy, in one run.

On a GPU node:  torchrun --nproc-per-node 2 -m slime_flashqla.bench.comm --backend nccl --json comm.json
On a CPU box:   python -m slime_flashqla.bench.comm --backend gloo --nproc 2 --json comm.json
(or `slime-flashqla bench comm ...`).  Under a launcher (WORLD_SIZE in the environment) rank 0 prints
the tables (rich, or --plain text) and writes the JSON (--json) and the tables as Markdown
(--markdown); with --nproc the command starts the ranks itself, rank 0 hands its report back, and
the command prints and writes it once every rank has finished, so that a run stopped by Ctrl-C or
SIGTERM (which stop every rank) writes nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import signal
import socket
import statistics
import sys
import tempfile
import time
import warnings
from datetime import UTC, datetime, timedelta
from pathlib import Path

from slime_flashqla.bench.options import available_memory, check_bounds, output_paths, write_output
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
# A message as large as nccl-tests go: 3 buffers of it per rank fit on every GPU bench comm is for.
MAX_SIZE = 16 * 1024**3
# Ranks --nproc starts on this host; beyond that a CPU box measures its scheduler, not the guard.
MAX_LOCAL_RANKS = 64
# What one gloo rank holds besides its buffers (a rank's resident set is ~170 MiB, most of it shared
# with the command when forked: counted whole, with room), and how many buffers of the largest size
# it holds at once (the full one, a part, an output or inbox).
RANK_MEMORY = 256 * 1024**2
BUFFERS_PER_RANK = 3
RENDEZVOUS_TIMEOUT_S = 60.0
# Above this spread of the A/A ratio (the unwrapped call against itself) the run cannot resolve
# the few-percent differences the guard makes.
AA_NOISE = 0.05
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
    parser.add_argument(
        "--nproc",
        type=int,
        default=2,
        help=f"ranks to start here when not under a launcher, 2 to {MAX_LOCAL_RANKS} (nccl: at most the visible GPUs), "
        "and their buffers must fit in the available memory (default 2)",
    )
    parser.add_argument(
        "--ops", nargs="+", choices=OPS, default=list(OPS), metavar="OP", help=f"{', '.join(OPS)} (default all)"
    )
    parser.add_argument(
        "--sizes",
        nargs="+",
        type=_size,
        default=list(DEFAULT_SIZES),
        help=f"message sizes, e.g. 4K 64M, a multiple of 4 bytes up to {_human(MAX_SIZE)} (default 4K 64M)",
    )
    parser.add_argument("--rounds", type=int, help="interleaved rounds over the variants (default: nccl 40, gloo 5)")
    parser.add_argument(
        "--iters-small", type=int, help="calls per timed block for sizes < 1 MiB (default: nccl 50, gloo 20)"
    )
    parser.add_argument(
        "--iters-large", type=int, help="calls per timed block for sizes >= 1 MiB (default: nccl 10, gloo 2)"
    )
    parser.add_argument("--warmup", type=int, default=5, help="untimed calls before each timed block (default 5)")
    parser.add_argument(
        "--rendezvous-timeout",
        type=float,
        default=RENDEZVOUS_TIMEOUT_S,
        metavar="SECONDS",
        help=f"how long a rank waits for the others to join, 1 to 3600 (default {RENDEZVOUS_TIMEOUT_S:g})",
    )


def _size(text: str) -> int:
    """Parse 4096, 4K, 64M, 1G (binary multiples) into bytes."""
    units = {"K": 1024, "M": 1024**2, "G": 1024**3}
    text = text.strip().upper().removesuffix("B").removesuffix("I")
    try:
        value = int(float(text[:-1]) * units[text[-1]]) if text and text[-1] in units else int(text)
    except (ValueError, OverflowError):  # OverflowError: infK, 1e400K (argparse reports only the first)
        raise argparse.ArgumentTypeError(f"size {text!r}: use bytes or a K/M/G suffix, e.g. 4K, 64M") from None
    if value < 4 or value % 4:
        raise argparse.ArgumentTypeError(f"size {text!r}: must be a positive multiple of 4 bytes (float32)")
    if value > MAX_SIZE:
        raise argparse.ArgumentTypeError(f"size {text!r}: at most {_human(MAX_SIZE)} per message")
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
            del call  # its buffers go before the next size's are made, as the memory check counts them
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
    again = [r["ratio"][mode][AGAIN] for r in rows for mode in MODES]
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
            # the unwrapped call's ratio to itself over every row and mode: the run's resolution
            "aa_spread": {"low": min(again), "high": max(again)},
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


def resolution_note(spread: dict) -> str:
    """One line on what the A/A spread (the unwrapped call timed twice) lets the other ratios say."""
    low, high = spread["low"], spread["high"]
    head = f"A/A: {low:.2f}x to {high:.2f}x ({AGAIN!r} / unwrapped)"
    if low < 1 - AA_NOISE or high > 1 + AA_NOISE:
        return (
            f"{head}: a ratio between {low:.2f}x and {high:.2f}x cannot be told from noise in this run "
            "(a busy host, or too few --rounds)"
        )
    return f"{head}: the run's resolution; a ratio within it shows no difference"


def format_table(report: dict) -> str:
    """Render the report as Markdown: per timing mode one row per op and size, one column per variant."""
    from slime_flashqla.bench.report import markdown_table

    lines = [RATIO_NOTE, "", resolution_note(report["meta"]["aa_spread"]), ""]
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
    print(resolution_note(report["meta"]["aa_spread"]))
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


def _launcher_rank() -> tuple[int, int, str, int] | None:
    """(rank, world size, address, port) a launcher put in the environment, or None without WORLD_SIZE."""
    if "WORLD_SIZE" not in os.environ:
        return None
    hint = "start every rank through torchrun, or unset WORLD_SIZE to start --nproc local ranks"
    for name in ("RANK", "MASTER_ADDR", "MASTER_PORT"):
        if not os.environ.get(name):
            raise UserError(f"WORLD_SIZE is set but {name} is not: {hint}")
    env = {name: os.environ[name] for name in ("WORLD_SIZE", "RANK", "MASTER_PORT")}
    try:
        world, rank, port = (int(env[name]) for name in ("WORLD_SIZE", "RANK", "MASTER_PORT"))
    except ValueError:
        shown = " ".join(f"{name}={value!r}" for name, value in env.items())
        raise UserError(f"the launcher's environment holds {shown}: whole numbers expected; {hint}") from None
    if world < 2:
        raise UserError(f"WORLD_SIZE={world} (from the environment): a collective needs peers; {hint}")
    if not 0 <= rank < world or not 0 < port < 65536:
        raise UserError(f"RANK={rank} of WORLD_SIZE={world}, MASTER_PORT={port} (from the environment): {hint}")
    return rank, world, os.environ["MASTER_ADDR"], port


def _rendezvous(args: argparse.Namespace, rank: int, world: int, address: str, port: int, hint: str) -> None:
    """Meet the other ranks at address:port within --rendezvous-timeout, then init the process group."""
    import torch.distributed as dist

    from slime_flashqla.errors import one_line
    from slime_flashqla.files.termination import interruptible

    timeout = timedelta(seconds=args.rendezvous_timeout)

    def meet():  # rank 0 serves the store and waits for every other rank to connect to it
        return dist.TCPStore(address, port, world, is_master=rank == 0, timeout=timeout, wait_for_workers=True)

    try:
        store = interruptible(meet)  # torch waits in C++: in a thread, so that signals still stop the wait
    except RuntimeError as error:
        raise UserError(
            f"the {world} ranks did not all join at {address}:{port} within {args.rendezvous_timeout:g} s "
            f"({one_line(error)}); {hint}"
        ) from error
    with without_gloo_chatter():
        dist.init_process_group(args.backend, store=store, rank=rank, world_size=world)


def _run_launched(args: argparse.Namespace, rank: int, world: int, address: str, port: int) -> None:
    """Be one rank of a launcher's world: meet the others, benchmark, report on rank 0, tear down."""
    import torch
    import torch.distributed as dist

    if args.backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    hint = "start every rank (torchrun --nproc-per-node N -m slime_flashqla.bench.comm ...), or unset WORLD_SIZE"
    hint += " to start --nproc local ranks"
    if rank == 0:  # a stale WORLD_SIZE (an old torchrun shell, a PyTorchJob pod) lands here: say so
        print(
            f"bench comm: rank 0 of WORLD_SIZE={world} (from the environment): waiting up to "
            f"{args.rendezvous_timeout:g} s for the other ranks at {address}:{port}; unset WORLD_SIZE to start "
            "--nproc local ranks instead",
            file=sys.stderr,
            flush=True,
        )
    _rendezvous(args, rank, world, address, port, hint)
    try:
        report = _measure(args)
        if report is not None:
            publish(report, args)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _measure(args: argparse.Namespace) -> dict | None:
    """run_rank with all_gather_into_tensor's deprecation notice held back."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return run_rank(args)


def publish(report: dict, args: argparse.Namespace) -> None:
    """Print the tables and write --json and --markdown (their paths were checked before the run)."""
    print_report(report, getattr(args, "plain", False))
    if args.json:
        write_output(Path(args.json), json.dumps(report, indent=1) + "\n")
        print(f"wrote {args.json}")
    if getattr(args, "markdown", None):
        write_output(Path(args.markdown), format_table(report) + "\n")
        print(f"wrote {args.markdown}")


def _stay_with_parent(parent: int) -> None:
    """End this rank when the command's process ends, even by SIGKILL (Linux), so that no rank is orphaned."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None).prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() != parent:  # it went before the line above took effect
        os._exit(1)


def _rank_process(rank: int, world: int, port: int, args: argparse.Namespace, outbox, parent: int) -> None:
    """One rank started by --nproc: benchmark, then send ("ok", report or None) or ("error", ...) to the command."""
    _stay_with_parent(parent)
    # The command stops its ranks: Ctrl-C reaches the whole process group, and the command then
    # ends every rank with SIGTERM, which ends a rank at once and quietly (a fork inherits the
    # command's SIGTERM handler, whose exception would print a traceback per rank).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        import torch
        import torch.distributed as dist

        if args.backend == "nccl":
            torch.cuda.set_device(rank)
        _rendezvous(args, rank, world, "127.0.0.1", port, "the machine may be too busy to start them all")
        try:
            report = _measure(args)
        finally:
            dist.destroy_process_group()
        outbox.send(("ok", report))
    except Exception as error:
        outbox.send(("error", _portable(error), f"{type(error).__name__}: {error}"))
        sys.exit(1)


def _portable(error: Exception) -> Exception | None:
    """`error` if it survives a trip through pickle (so the command can raise it as the rank did), else None."""
    import pickle

    try:
        pickle.loads(pickle.dumps(error))
    except Exception:
        return None
    return error


def _rank_failure(rank: int, code: int, message) -> Exception:
    """The command's error for a rank that exited with `code` after sending `message` (or nothing)."""
    if message and message[0] == "error":
        # The rank's own exception where it could be sent: its type says whether it is the user's to fix.
        _, error, text = message
        return error if error is not None else RuntimeError(f"rank {rank}: {text}")
    if code < 0:
        name = signal.Signals(-code).name
        return RuntimeError(f"rank {rank} was killed by {name}" + (" (out of memory?)" if name == "SIGKILL" else ""))
    return RuntimeError(f"rank {rank} exited with status {code} and sent no result")


def _stop(ranks: list, grace_s: float = 5.0) -> None:
    """End every rank still running (SIGTERM, then SIGKILL after `grace_s`) and reap them all."""
    for rank in ranks:
        if rank.is_alive():
            rank.terminate()
    deadline = time.monotonic() + grace_s
    for rank in ranks:
        rank.join(max(0.0, deadline - time.monotonic()))
        if rank.is_alive():
            rank.kill()
            rank.join()


def _run_local_ranks(args: argparse.Namespace) -> dict:
    """Start --nproc ranks here, wait for all of them, and return rank 0's report; stop them all on any way out."""
    import multiprocessing
    from multiprocessing.connection import wait

    # CUDA cannot be used in a forked child; gloo ranks start faster by fork.
    context = multiprocessing.get_context("spawn" if args.backend == "nccl" else "fork")
    settings = argparse.Namespace(**{k: v for k, v in vars(args).items() if k != "func"})  # picklable for spawn
    with socket.socket() as s:  # a free port for the rendezvous; the tiny race is acceptable here
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ranks, inboxes, messages = [], [], {}
    try:
        for rank in range(args.nproc):
            inbox, outbox = context.Pipe(duplex=False)
            process = context.Process(
                target=_rank_process,
                args=(rank, args.nproc, port, settings, outbox, os.getpid()),
                name=f"slime-flashqla-bench-comm-rank-{rank}",
                daemon=True,
            )
            process.start()
            outbox.close()
            ranks.append(process)
            inboxes.append(inbox)
        running = set(range(args.nproc))
        while running:
            unread = [inboxes[rank] for rank in running if rank not in messages]
            ready = wait([ranks[rank].sentinel for rank in running] + unread)
            for rank in sorted(running):
                if inboxes[rank] in ready and rank not in messages:
                    messages[rank] = _receive(inboxes[rank])
                if ranks[rank].sentinel in ready:
                    ranks[rank].join()
                    if rank not in messages:  # it may have written and exited in the same instant
                        messages[rank] = _receive(inboxes[rank]) if inboxes[rank].poll() else None
                    if ranks[rank].exitcode != 0 or not messages[rank] or messages[rank][0] != "ok":
                        raise _rank_failure(rank, ranks[rank].exitcode, messages[rank])
                    running.discard(rank)
        return messages[0][1]
    finally:
        _stop(ranks)
        for inbox in inboxes:
            inbox.close()


def _receive(inbox):
    """The one message a rank sends, or None if it closed its end without one."""
    try:
        return inbox.recv()
    except EOFError:
        return None


def _check_local_ranks(args: argparse.Namespace) -> None:
    """Refuse a --nproc run this machine cannot hold, before any rank starts."""
    import torch

    check_bounds(UserError, ("--nproc", args.nproc, 2, MAX_LOCAL_RANKS))
    largest = max((size for op in args.ops if op not in SIZE_FREE_OPS for size in args.sizes), default=0)
    if args.backend == "nccl":
        if torch.cuda.device_count() < args.nproc:
            raise UserError(f"--nproc {args.nproc} > {torch.cuda.device_count()} visible GPUs")
        smallest = min(torch.cuda.get_device_properties(i).total_memory for i in range(args.nproc))
        if BUFFERS_PER_RANK * largest > smallest:
            raise UserError(
                f"--sizes {_human(largest)}: a rank holds {BUFFERS_PER_RANK} buffers of it, more than a GPU's "
                f"{smallest / 1024**3:.1f} GiB"
            )
        return
    need = args.nproc * (RANK_MEMORY + BUFFERS_PER_RANK * largest)
    available = available_memory()
    if available is not None and need > available:
        raise UserError(
            f"{args.nproc} ranks with {_human(largest) if largest else 'no'} messages need about "
            f"{need / 1024**3:.1f} GiB of memory; this machine has {available / 1024**3:.1f} GiB available: "
            "use a smaller --nproc or --sizes"
        )


def run(args: argparse.Namespace) -> int:
    """Benchmark as one rank of a launcher's world (WORLD_SIZE set), or start --nproc local ranks."""
    import torch

    if args.backend is None:
        args.backend = "nccl" if torch.cuda.is_available() else "gloo"
    if args.backend == "nccl" and not torch.cuda.is_available():
        raise UserError("--backend nccl needs CUDA GPUs; use --backend gloo on this machine")
    counts = [1 if n is None else n for n in (args.rounds, args.iters_small, args.iters_large)]
    if min(counts) < 1 or args.warmup < 0:
        raise UserError("--rounds and --iters-* must be >= 1, --warmup >= 0")
    check_bounds(UserError, ("--rendezvous-timeout", args.rendezvous_timeout, 1, 3600))
    # Where the results go is checked before any rank starts, as every benchmark checks it.
    for option, path in output_paths(args, UserError, ("json", "markdown")).items():
        setattr(args, option, str(path))
    launched = _launcher_rank()
    if launched is None and args.nproc < 2:
        raise UserError("--nproc must be >= 2 (a collective needs peers)")
    world = launched[1] if launched else args.nproc
    if "isend+irecv" in args.ops and world % 2:
        raise UserError(f"isend+irecv pairs ranks (0,1), (2,3)...; world size {world} is odd")
    if launched is not None:
        _run_launched(args, *launched)
        return 0
    _check_local_ranks(args)
    publish(_run_local_ranks(args), args)
    return 0


if __name__ == "__main__":  # torchrun's ranks: through the CLI, so that bad input is one line there too
    from slime_flashqla.cli import main as cli_main

    sys.exit(cli_main(["bench", "comm", *sys.argv[1:]]))
