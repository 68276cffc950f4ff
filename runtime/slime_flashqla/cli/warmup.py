"""`slime-flashqla warmup`: compile GDN kernels for given head configurations into the kernel cache."""

from __future__ import annotations

import argparse
import json
import time

from slime_flashqla.errors import UserError
from slime_flashqla.gdn.names import KERNEL_BACKEND_NAMES


def register(subparsers) -> None:
    """Add the `warmup` subcommand."""
    from slime_flashqla.kernel_cache.capacity import JOB_MEMORY, MAX_JOBS, MAX_THREADS, THREAD_MEMORY
    from slime_flashqla.kernel_cache.warmup import PART_PURPOSE

    parser = subparsers.add_parser(
        "warmup",
        help="compile FlashQLA/FLA kernels for head configurations into a persistent cache (one compile per node)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Each configuration is warmed in parts, each its own process (--json lists them):\n"
        f"  layer                    {PART_PURPOSE['layer']}\n"
        f"  no-cp, intra-cp, kernel  {PART_PURPOSE['paths']}\n"
        f"  <path>+states            {PART_PURPOSE['+states']}",
    )
    parser.add_argument("--model", action="append", default=[], help="model name or path to its config.json")
    parser.add_argument("--tp", help="comma list of tensor-parallel sizes for --model (default 1)")
    parser.add_argument(
        "--cp",
        help="comma list of context-parallel sizes for --model: GDN splits its heads over TP x CP ranks, so each "
        "rank runs heads/(tp*cp) (default 1)",
    )
    parser.add_argument("--heads", default="", help="comma list of Hk/Hv per rank, e.g. 16/32,8/16")
    parser.add_argument(
        "--backends",
        default="flashqla",
        help=f"comma list of backends to warm: {', '.join(KERNEL_BACKEND_NAMES)} (default flashqla)",
    )
    parser.add_argument(
        "--lengths",
        default="1000+3096,8192+24576",
        help="packed batches run per configuration, in bench gdn's shape notation ('+'-joined lengths, AxB for B "
        "sequences of A) (default 1000+3096,8192+24576: a long one too, since FlashQLA compiles separate kernels "
        "for long sequences)",
    )
    parser.add_argument(
        "--max-tokens",
        type=int,
        default=32768,
        help="the largest pack training runs, in tokens, 64 to 4194304 (default 32768): the coverage packs reach it",
    )
    parser.add_argument("--dense", action="store_true", help="also warm the non-varlen (B > 1) kernels")
    parser.add_argument(
        "--training-only",
        action="store_true",
        help="leave out the +states parts, which only `slime-flashqla check` runs (training passes no state)",
    )
    parser.add_argument("--cache-dir", default=None, help="TileLang cache directory (default: $TILELANG_CACHE_DIR)")
    parser.add_argument(
        "--jobs",
        default="auto",
        help=f"parts compiled at once, one process each, 1 to {MAX_JOBS} (default auto: one per CPU this process "
        f"may use, as many as the available memory holds at {JOB_MEMORY // 2**30} GiB each, at most the parts)",
    )
    parser.add_argument(
        "--compile-threads",
        default="auto",
        help=f"TileLang kernels a part compiles at once, 1 to {MAX_THREADS}; 1 compiles each when the part's steps "
        f"first call it (default auto: the CPUs the jobs leave, {THREAD_MEMORY // 2**30} GiB of memory each)",
    )
    parser.add_argument("--force", action="store_true", help="run every configuration even if marked done")
    parser.add_argument("--plain", action="store_true", help="plain progress lines even on a terminal with rich")
    parser.add_argument("--device", default="cuda", help=argparse.SUPPRESS)  # tests run the machinery on CPU
    parser.add_argument(
        "--json",
        default=None,
        help="write the results to this JSON file (checked before any compile; written whole at the end)",
    )
    parser.set_defaults(func=run)


def build_tasks(args):
    """The warm-up tasks the arguments describe (validated before anything runs)."""
    from slime_flashqla.kernel_cache.capacity import MAX_JOBS, MAX_THREADS
    from slime_flashqla.kernel_cache.warmup import MAX_TOKENS, WARMUP_BACKENDS, WarmupTask, warmup_parts
    from slime_flashqla.kernels.preload import preload_mode
    from slime_flashqla.workload.heads import parse_heads
    from slime_flashqla.workload.models import model_rank_heads

    heads = parse_heads(args.heads) if args.heads.strip() else []
    heads += model_rank_heads(args.model, args.tp, args.cp)
    if not heads:
        raise ValueError("nothing to warm: give --model and/or --heads")
    backends = [item.strip() for item in args.backends.split(",") if item.strip()]
    unknown = [b for b in backends if b not in WARMUP_BACKENDS]
    if unknown:
        raise ValueError(f"unknown backend(s) {', '.join(unknown)}; choose from {', '.join(WARMUP_BACKENDS)}")
    if not 64 <= args.max_tokens <= MAX_TOKENS:
        raise ValueError(f"--max-tokens must be between 64 and {MAX_TOKENS} tokens, got {args.max_tokens}")
    preload_mode()  # a bad SLIME_FLASHQLA_PRELOAD would fail every layer a part builds, or pass unseen
    _count("--jobs", args.jobs, MAX_JOBS)
    _count("--compile-threads", args.compile_threads, MAX_THREADS)
    layouts = (True, False) if args.dense else (True,)
    return [
        WarmupTask(backend, h, varlen, part=part, max_tokens=args.max_tokens)
        for backend in backends
        for h in sorted(set(heads))
        for varlen in layouts
        for part in warmup_parts(backend, varlen, check=not args.training_only)
    ]


def _count(option: str, text: str, most: int) -> int | None:
    """The count an `auto`-or-number option asks for; None for auto. ValueError with the bounds otherwise."""
    if text == "auto":
        return None
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{option} must be auto or a whole number, got {text!r}") from None
    if value < 1:
        raise ValueError(f"{option} must be at least 1, got {value}")
    if value > most:
        raise ValueError(f"{option} must be at most {most}, got {value}")
    return value


def parse_lengths(text: str) -> tuple[tuple[int, ...], ...]:
    """Parse `1000+3096,8192+24576` (bench gdn's shape grammar: `8192x4` too) into packed batches of lengths."""
    from slime_flashqla.kernel_cache.warmup import MAX_TOKENS
    from slime_flashqla.workload.lengths import ShapeError, parse_shapes

    try:
        batches = tuple(shape.lengths for shape in parse_shapes(text))
    except ShapeError as error:
        raise ValueError(f"--lengths {text!r}: {error}") from None

    if any(sum(batch) > MAX_TOKENS for batch in batches):
        raise ValueError(f"--lengths {text!r}: a batch holds at most {MAX_TOKENS} tokens")
    return batches


def _check_backends(tasks, device: str) -> None:
    from slime_flashqla.gdn import get_chunk_gated_delta_rule
    from slime_flashqla.gdn.backends import KERNEL_BACKENDS

    for backend in sorted({task.backend for task in tasks}):
        # Off CUDA (the tests' CPU runs) only a backend whose kernel runs there can be asked.
        if device == "cuda" or KERNEL_BACKENDS[backend].runs_on(device.split(":")[0]):
            get_chunk_gated_delta_rule(backend)  # raises with the reason before any process starts


def _check_device(device: str) -> None:
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        raise UserError(
            "no CUDA GPU is visible (torch.cuda.is_available() is False): warmup compiles the GPU kernels "
            "a training step runs, so run it on a node with the GPUs that will train"
        )


def run(args) -> int:
    """Warm the kernels, show progress, print a summary; non-zero if any part failed."""
    from slime_flashqla.files.output_paths import check_output_path, publish_atomically
    from slime_flashqla.kernel_cache.capacity import MAX_JOBS, MAX_THREADS, default_jobs, default_threads, node_budget
    from slime_flashqla.kernel_cache.schedule import PartSettings
    from slime_flashqla.kernel_cache.warmup import set_cache_dir

    # Everything that can be refused is, in one line, before a process starts or a kernel compiles.
    tasks = build_tasks(args)
    lengths = parse_lengths(args.lengths)
    json_path = check_output_path(args.json, what="--json") if args.json is not None else None
    _check_device(args.device)
    try:
        cache_dir = set_cache_dir(args.cache_dir)
    except RuntimeError as error:  # tilelang already imported with another cache
        raise UserError(str(error)) from None
    _check_backends(tasks, args.device)
    budget = node_budget()
    asked_jobs = _count("--jobs", args.jobs, MAX_JOBS)
    jobs = min(asked_jobs, len(tasks)) if asked_jobs else default_jobs(len(tasks), budget)
    threads = _count("--compile-threads", args.compile_threads, MAX_THREADS) or default_threads(jobs, budget)
    configurations = len({(task.backend, task.heads, task.varlen) for task in tasks})
    print(
        f"warming {len(tasks)} part(s) of {configurations} configuration(s) into {cache_dir} with {jobs} job(s) at "
        f"once, up to {threads} compile thread(s) each ({budget.describe()})",
        flush=True,
    )
    settings = PartSettings(str(cache_dir), args.force, lengths, args.device, threads)
    start = time.perf_counter()
    results = _run_with_progress(tasks, settings, jobs, args.plain, json_path)
    total = time.perf_counter() - start
    failed = [r for r in results if r["status"].startswith("failed")]
    from slime_flashqla.terminal import print_rows

    rows = [(r["key"], _row(r)) for r in results]
    rows.append(("total wall time", f"{total:.1f} s"))
    print_rows("slime-flashqla warmup", rows, headers=("part", "result"))
    if json_path is not None:
        report = {"cache_dir": str(cache_dir), "jobs": jobs, "compile_threads": threads, "cpus": budget.cpus,
                  "memory_available": budget.memory, "wall_seconds": total, "results": results}  # fmt: skip
        text = json.dumps(report, indent=2)
        publish_atomically(json_path, lambda temp: temp.write_text(text), what="--json")
    return 1 if failed else 0


def _row(result: dict) -> str:
    if result["status"].startswith("failed"):
        return result["status"]  # how it ended and where its log is
    row = f"{result['status']} in {result['seconds']:.1f} s (waited {result['waited_seconds']:.1f} s)"
    return f"{row}; {result['prefetch']}" if result.get("prefetch") else row


def _run_with_progress(tasks, settings, jobs: int, plain: bool, json_path):
    from slime_flashqla.kernel_cache.progress import WarmupProgress
    from slime_flashqla.kernel_cache.schedule import run_parts
    from slime_flashqla.terminal import table_console

    with WarmupProgress(len(tasks), table_console(plain)) as progress:
        return run_parts(tasks, settings, jobs, progress, keep_logs_beside=json_path)
