"""`slime-flashqla bench stream`: a seeded RL-like stream of training steps, one fresh process per variant.

Where `bench gdn` warms up and then times one shape, this measures what a training run feels:
time from process start to the first step, every step's seconds while pack sizes change, the
stalls, and the TileLang compiles and Triton compiles/autotunes each step caused (counted from
the libraries' own hooks and logs: kernels/compile_log.py). Every variant runs the same packs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from slime_flashqla.bench.options import (
    MAX_HEAD_DIM,
    MAX_HIDDEN_SIZE,
    check_bounds,
    check_seed,
    layer_setup,
    output_paths,
    parse_device,
    write_output,
)
from slime_flashqla.bench.report import environment
from slime_flashqla.bench.stream_progress import ProgressFile, StreamProgress
from slime_flashqla.bench.stream_worker import NOGRAD_PASSES, StreamJob
from slime_flashqla.bench.variants import VARIANTS, Variant, variant_problem
from slime_flashqla.errors import UserError
from slime_flashqla.files.child_logs import KeptLogs, exit_words, log_tail
from slime_flashqla.gdn.names import BACKENDS
from slime_flashqla.terminal import print_table, table_console
from slime_flashqla.workload.heads import HeadConfig, parse_heads
from slime_flashqla.workload.packs import (
    DEFAULT_MEDIAN_LEN,
    DEFAULT_MIN_LEN,
    DISTRIBUTIONS,
    MAX_SIGMA,
    MIN_ALPHA,
    PackDistribution,
    PackError,
    derived_lengths,
)
from slime_flashqla.workload.setup import DTYPES, LAYER_MODELS, LayerSetup

LEVELS = ("layer", "kernel")
# train: one forward+backward per step. rl: as slime's actor runs an RL step, two forward-only passes
# under no_grad (the actor's and the reference model's log-probs), then forward+backward.
MODES = ("train", "rl")
# Ours and slime's two paths. A layer: slime's own layer class with --qwen-gdn-backend flashqla and
# with its default fla. A kernel: FlashQLA's own function with q/k repeated (slime's FlashQLA path),
# and FLA's public function with q/k repeated and FLA_FLASH_QLA=0 (slime's default path).
DEFAULT_VARIANTS = {
    "layer": ("auto", "slime-layer-flashqla", "slime-layer-fla"),
    "kernel": ("auto", "flashqla-repeat", "slime-fla"),
}
STALL_FACTOR = 1.5  # a step slower than this times the steady median counts as a stall
COMPILE_KINDS = ("tilelang-compile", "triton-compile")
AUTOTUNE_KINDS = ("triton-autotune",)
# The packs are drawn up front and every step's seconds are kept; 10,000 steps run for hours on a GPU.
MAX_STEPS = 10_000
POLL_SECONDS = 0.25  # how often the parent reads a worker's progress


class StreamInputError(UserError, ValueError):
    """Bad command-line input, reported before any process starts."""


@dataclass
class StreamPlan:
    """The parsed options of one run."""

    setup: LayerSetup  # device, dtype, sizes, seed (also the packs'), the layer class --level layer runs
    level: str
    heads: list[HeadConfig]
    variants: list[Variant]
    steps: int
    packs: PackDistribution
    cache_dir: str | None = None
    timeout: float = 3600.0
    mode: str = "train"  # one of MODES
    jobs: list[StreamJob] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # variant -> why it cannot run here
    outputs: dict[str, Path] = field(default_factory=dict)  # --json/--plot -> the file it writes, checked

    def job(self, variant: Variant, heads: HeadConfig, result) -> StreamJob:
        """The worker's job for one variant and head configuration, its result written to `result`."""
        return StreamJob(
            variant=variant.name,
            level=self.level,
            heads=heads.label,
            steps=self.steps,
            packs=asdict(self.packs),
            setup=self.setup,
            spawned=0.0,
            result=str(result),
            env=dict(variant.env),
            mode=self.mode,
        )


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the `bench stream` options to a parser."""
    parser.description = __doc__.splitlines()[0]
    parser.add_argument(
        "--steps", type=int, default=200, help=f"training steps per variant, 2 to {MAX_STEPS} (default 200)"
    )
    parser.add_argument("--level", choices=LEVELS, default="layer", help="a whole GDN layer (default) or the kernel")
    parser.add_argument(
        "--mode",
        choices=MODES,
        default="train",
        help="what a step runs: train, one forward+backward (default); rl, as slime's actor runs an RL step, "
        f"{NOGRAD_PASSES} forward-only passes under no_grad (the log-probs), then forward+backward",
    )
    parser.add_argument("--heads", default="", help="comma list of Hk/Hv per rank (default 16/32)")
    parser.add_argument("--model", action="append", default=[], help="model name or config.json, as warmup takes it")
    parser.add_argument("--tp", help="comma list of tensor-parallel sizes for --model (default 1)")
    parser.add_argument(
        "--variants",
        default=None,
        help=f"comma list of {', '.join(VARIANTS)} (default at --level layer: {','.join(DEFAULT_VARIANTS['layer'])}; "
        f"kernel: {','.join(DEFAULT_VARIANTS['kernel'])})",
    )
    parser.add_argument("--backend", help=f"run one backend alone ({', '.join(BACKENDS)}) instead of --variants")
    parser.add_argument("--device", help="cuda, cuda:N or cpu (default: cuda when a GPU is present)")
    parser.add_argument(
        "--max-tokens", type=int, default=32768, help="largest pack, in tokens, at most 2**31-1 (default 32768)"
    )
    parser.add_argument(
        "--min-len",
        type=int,
        help=f"shortest sequence (default {DEFAULT_MIN_LEN}, or --max-tokens where that is smaller)",
    )
    parser.add_argument(
        "--median-len",
        type=int,
        help=f"median sequence length (default {DEFAULT_MEDIAN_LEN}, or --max-tokens / 8 where that is smaller, "
        "never below --min-len)",
    )
    parser.add_argument(
        "--dist", choices=DISTRIBUTIONS, default="lognormal", help="sequence length distribution (default lognormal)"
    )
    parser.add_argument(
        "--sigma", type=float, default=1.2, help=f"log-normal spread of the lengths, (0, {MAX_SIGMA:g}] (default 1.2)"
    )
    parser.add_argument(
        "--alpha", type=float, default=1.2, help=f"pareto tail index of the lengths, >= {MIN_ALPHA:g} (default 1.2)"
    )
    parser.add_argument(
        "--min-fill",
        type=float,
        default=0.25,
        help="each pack's budget is uniform in [min-fill, 1] x max-tokens (default 0.25)",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of the packs, inputs and weights, 0 to 2**64-1 (default 0)"
    )
    parser.add_argument("--dtype", choices=DTYPES, help="default bf16 on GPU, fp32 on CPU")
    parser.add_argument("--head-dim", type=int, default=128, help="K = V head size (default 128)")
    parser.add_argument("--hidden-size", type=int, default=2048, help="layer hidden size (default 2048)")
    parser.add_argument(
        "--layer-model",
        choices=LAYER_MODELS,
        default="qwen3-next",
        help="the GDN layer --level layer runs: Qwen3-Next's fused projections or Qwen3.5's (default qwen3-next)",
    )
    parser.add_argument(
        "--slime-source",
        metavar="DIR",
        help="a slime checkout for the slime-layer-* variants (default: $SLIME_SOURCE, else importable slime_plugins)",
    )
    parser.add_argument("--cache-dir", help="TileLang cache directory for the workers (default: $TILELANG_CACHE_DIR)")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds one variant may take (default 3600)")
    parser.add_argument(
        "--skip-unavailable",
        action="store_true",
        help="list variants that cannot run here as skipped (with the reason) instead of exiting with 2",
    )
    parser.add_argument("--json", metavar="PATH", help="write steps and summary as JSON")
    parser.add_argument(
        "--plot", metavar="PATH.png", help="step time against step, a line per variant, log scale (needs matplotlib)"
    )
    parser.add_argument("--plain", action="store_true", help="plain-text progress and table even with rich")
    return parser


def _heads(args) -> list[HeadConfig]:
    from slime_flashqla.workload.models import model_rank_heads

    try:
        heads = parse_heads(args.heads) if args.heads.strip() else []
        heads += model_rank_heads(args.model, args.tp)
    except ValueError as error:
        raise StreamInputError(str(error)) from None
    return list(dict.fromkeys(heads)) or [HeadConfig(16, 32)]


def _variants(args) -> list[Variant]:
    if args.backend and args.variants:
        raise StreamInputError("give --backend or --variants, not both")
    if args.backend:
        # The backend's own variant: this package's backend, q/k grouped (flashqla-gva, fla-gva, torch, auto).
        own = [v for v in VARIANTS.values() if v.backend == args.backend and not (v.repeat or v.direct)]
        if args.backend not in BACKENDS or not own:
            raise StreamInputError(f"unknown --backend {args.backend!r}; choose from {', '.join(BACKENDS)}")
        return own[:1]
    names = [item.strip() for item in (args.variants or ",".join(DEFAULT_VARIANTS[args.level])).split(",")]
    names = [name for name in names if name]
    unknown = [name for name in names if name not in VARIANTS]
    if unknown or not names:
        raise StreamInputError(
            f"unknown variant(s) {', '.join(unknown) or '(none)'}; choose from {', '.join(VARIANTS)}"
        )
    return [VARIANTS[name] for name in dict.fromkeys(names)]


def build_plan(args: argparse.Namespace) -> StreamPlan:
    """Parse and check the options; raise StreamInputError naming the first problem."""
    check_bounds(
        StreamInputError,
        ("--steps", args.steps, 2, MAX_STEPS),
        ("--head-dim", args.head_dim, 1, MAX_HEAD_DIM),
        ("--hidden-size", args.hidden_size, 1, MAX_HIDDEN_SIZE),
        ("--timeout", args.timeout, 1, None),
    )
    check_seed(StreamInputError, args.seed)
    _check_preload_setting()
    # Defaults the user did not set follow the limits the user did set (--max-tokens 256 on a CPU).
    min_len, median_len = derived_lengths(args.max_tokens, args.min_len, args.median_len)
    try:
        packs = PackDistribution(
            max_tokens=args.max_tokens,
            min_len=min_len,
            median_len=median_len,
            sigma=args.sigma,
            alpha=args.alpha,
            min_fill=args.min_fill,
            dist=args.dist,
            seed=args.seed,
        )
    except PackError as error:
        raise StreamInputError(str(error)) from None
    device = parse_device(args.device, StreamInputError)
    outputs = output_paths(args, StreamInputError, ("json", "plot"))
    return StreamPlan(
        setup=layer_setup(args, device),
        level=args.level,
        mode=args.mode,
        heads=_heads(args),
        variants=_variants(args),
        steps=args.steps,
        packs=packs,
        cache_dir=args.cache_dir,
        timeout=args.timeout,
        outputs=outputs,
    )


def _check_preload_setting() -> None:
    """A bad SLIME_FLASHQLA_PRELOAD, refused here: the workers' layers would each fail on it."""
    from slime_flashqla.kernels.preload import PreloadSettingError, preload_mode

    try:
        preload_mode()
    except PreloadSettingError as error:
        raise StreamInputError(str(error)) from None


def _problems(plan: StreamPlan) -> dict[str, str]:
    """{variant: why it cannot run here} (imports backends, launches nothing)."""
    problems = {}
    for variant in plan.variants:
        saved = {name: os.environ.get(name) for name, _ in variant.env}
        os.environ.update(variant.env)  # as its worker will run it
        try:
            reason = variant_problem(variant, "fwd+bwd", plan.heads[0], plan.setup, level=plan.level)
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
        if reason:
            problems[variant.name] = reason
    return problems


def run_worker(job: StreamJob, log_path: Path, timeout: float, cache_dir: str | None, on_step=None) -> dict:
    """Start one fresh worker process for `job`, wait for it, and return its result dict.

    `on_step(index, seconds)` is called for each step the worker finishes, while it runs.
    """
    job_path = Path(job.result).with_suffix(".job.json")
    job.progress = str(Path(job.result).with_suffix(".progress"))
    env = {**os.environ, **job.env, "PYTHONUNBUFFERED": "1"}
    if cache_dir:
        env["TILELANG_CACHE_DIR"] = str(Path(cache_dir).expanduser().resolve())
    command = [sys.executable, "-m", "slime_flashqla.bench.stream_worker", str(job_path)]
    progress = ProgressFile(Path(job.progress))
    with open(log_path, "w") as log:
        job.spawned = time.time()
        job_path.write_text(json.dumps(job.to_json()))
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            returncode = _wait(process, timeout, progress, on_step or (lambda index, seconds: None))
        finally:
            if process.poll() is None:  # timed out, or the parent was interrupted: no orphan worker
                process.kill()
                process.wait()
    if returncode is None:
        return {"error": f"timed out after {timeout:.0f} s"}
    path = Path(job.result)
    if not path.exists():
        return {"error": f"the worker {exit_words(returncode)} and wrote no result"}
    result = json.loads(path.read_text())
    if returncode and "error" not in result:
        result["error"] = f"the worker {exit_words(returncode)}"
    return result


def _wait(process: subprocess.Popen, timeout: float, progress: ProgressFile, on_step) -> int | None:
    """The worker's exit status, reporting its steps as they come; None when it outlives `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            returncode = process.wait(timeout=min(POLL_SECONDS, max(0.0, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            returncode = None
        for index, seconds in progress.new_steps():
            on_step(index, seconds)
        if returncode is not None:
            return returncode
        if time.monotonic() >= deadline:
            return None


def summarize(result: dict) -> dict:
    """first_step_s, steady_median_s, stall_s, total_s and the compiles/autotunes after step 0, of one worker."""
    steps = result["steps"]
    later = steps[1:]
    median = statistics.median(step["seconds"] for step in later)
    events = [event for step in later for event in step["events"]]
    first_step_s = result["first_step_end"] - result["job"]["spawned"]

    def names(kinds) -> dict[str, int]:
        return dict(Counter(event["name"] for event in events if event["kind"] in kinds).most_common())

    return {
        "variant": result["job"]["variant"],
        "heads": result["job"]["heads"],
        "level": result["job"]["level"],
        "first_step_s": first_step_s,
        # Step 0's own parts (rl mode): its forward-only passes, then its forward+backward.
        "first_step_nograd_s": sum(steps[0]["nograd_seconds"]) if "nograd_seconds" in steps[0] else None,
        "first_step_train_s": steps[0].get("train_seconds", steps[0]["seconds"]),
        "steady_median_s": median,
        # Steps after the first only: the first step's loads are in first_step_s.
        "stall_s": sum(max(0.0, step["seconds"] - STALL_FACTOR * median) for step in later),
        "total_s": first_step_s + sum(step["seconds"] for step in later),
        "peak_mib": max((step.get("peak_mib") or 0.0 for step in steps), default=0.0) or None,
        "compiles_after_warmup": sum(event["kind"] in COMPILE_KINDS for event in events),
        "autotunes_after_warmup": sum(event["kind"] in AUTOTUNE_KINDS for event in events),
        "torch_compiles_after_warmup": sum(event["kind"] == "torch-compile" for event in events),
        "compiled_after_warmup": names(COMPILE_KINDS),
        "autotuned_after_warmup": names(AUTOTUNE_KINDS),
        "first_step_compiles": sum(
            event["kind"] in COMPILE_KINDS + AUTOTUNE_KINDS for event in result["setup_events"] + steps[0]["events"]
        ),
        "hooked": result["hooked"],
    }


SUMMARY_HEADERS = (
    "Hk/Hv",
    "variant",
    "first step s",
    "steady median ms",
    "stall s",
    "total s",
    "peak MiB",
    "compiles after step 0",
    "autotunes after step 0",
    "what compiled or autotuned",
)


def summary_cells(summary: list[dict]) -> list[list[str]]:
    """The summary table as strings."""
    cells = []
    for item in summary:
        if "skipped" in item:
            cells.append([item["heads"], item["variant"], *["-"] * 7, f"SKIPPED {item['skipped']}"])
            continue
        if "error" in item:
            cells.append([item["heads"], item["variant"], *["-"] * 7, f"ERROR {item['error']}"])
            continue
        if "interrupted" in item:
            cells.append([item["heads"], item["variant"], *["-"] * 7, f"INTERRUPTED {item['interrupted']}"])
            continue
        what = {**item["compiled_after_warmup"], **item["autotuned_after_warmup"]}
        cells.append(
            [
                item["heads"],
                item["variant"],
                _first_step_cell(item),
                f"{item['steady_median_s'] * 1e3:.2f}",
                f"{item['stall_s']:.2f}",
                f"{item['total_s']:.2f}",
                "-" if item.get("peak_mib") is None else f"{item['peak_mib']:.0f}",
                str(item["compiles_after_warmup"]),
                str(item["autotunes_after_warmup"]),
                ", ".join(f"{name} x{n}" for name, n in what.items()) or "-",
            ]
        )
    return cells


def _first_step_cell(item: dict) -> str:
    """The first step's seconds, with its no-grad and training parts in rl mode."""
    if item.get("first_step_nograd_s") is None:
        return f"{item['first_step_s']:.2f}"
    nograd, train = item["first_step_nograd_s"], item["first_step_train_s"]
    return f"{item['first_step_s']:.2f} (no-grad {nograd:.2f}, train {train:.2f})"


def plot_steps(steps: list[dict], path: str, title: str) -> str | None:
    """Step seconds against step, one line per variant (a panel per head config, log scale); why not, or None."""
    from slime_flashqla.bench.plot import matplotlib_missing, save_figure

    missing = matplotlib_missing()
    if missing:
        return missing
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    heads = list(dict.fromkeys(step["heads"] for step in steps))
    figure = Figure(figsize=(9, 3.5 * len(heads)), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(len(heads), 1, squeeze=False)[:, 0]
    for ax, label in zip(axes, heads, strict=True):
        for variant in dict.fromkeys(step["variant"] for step in steps):
            mine = [step for step in steps if step["heads"] == label and step["variant"] == variant]
            ax.plot([s["step"] for s in mine], [s["seconds"] for s in mine], label=variant, linewidth=1)
        ax.set_yscale("log")
        ax.set_xlabel("step")
        ax.set_ylabel("seconds per step")
        ax.set_title(f"{title}, Hk/Hv {label}")
        ax.legend()
    save_figure(figure, path, dpi=110)
    return None


@dataclass
class StreamRun:
    """What a run has produced so far: kept whole when it is interrupted."""

    steps: list[dict] = field(default_factory=list)
    summary: list[dict] = field(default_factory=list)
    running: tuple[str, str] | None = None  # (variant, heads) whose worker runs now
    running_steps: list[tuple[int, float]] = field(default_factory=list)  # its steps so far

    def interrupted(self, packs: list[tuple[int, ...]]) -> None:
        """File the running variant's steps and an `interrupted` summary entry for it."""
        if self.running is None:
            return
        variant, heads = self.running
        for index, seconds in self.running_steps:
            lengths = packs[index]
            self.steps.append({"variant": variant, "heads": heads, "step": index, "tokens": sum(lengths),
                               "sequences": len(lengths), "seconds": seconds, "events": []})  # fmt: skip
        done = len(self.running_steps)
        self.summary.append(
            {"variant": variant, "heads": heads, "interrupted": f"after {done} of {len(packs)} steps",
             "steps_done": done}
        )  # fmt: skip
        self.running = None


STEP_KEYS = ("step", "tokens", "sequences", "seconds", "nograd_seconds", "train_seconds")


def run_plan(plan: StreamPlan, workdir: Path, progress: StreamProgress, run: StreamRun, logs: KeptLogs) -> None:
    """Run every (heads, variant) in its own process, filing steps and summary into `run` as each ends."""
    for heads in plan.heads:
        for variant in plan.variants:
            tag = f"{variant.name}-{heads.key_heads}-{heads.value_heads}"
            label = f"{heads.label} {variant.name}"
            job = plan.job(variant, heads, workdir / f"{tag}.result.json")
            log_path = workdir / f"{tag}.log"
            progress.start(label)
            run.running, run.running_steps = (variant.name, heads.label), []

            def on_step(index, seconds, label=label):
                run.running_steps.append((index, seconds))
                progress.step(label, index, seconds)

            result = run_worker(job, log_path, plan.timeout, plan.cache_dir, on_step)
            run.running = None
            if "error" in result:
                kept = logs.keep(log_path, tag)
                item = {"variant": variant.name, "heads": heads.label, "log_tail": log_tail(log_path)}
                last = item["log_tail"][-1:] or ["(empty)"]
                where = f"log: {kept}" if kept else "no log"
                item["error"] = f"{result['error']} (last log line: {last[0]}; {where})"
                item["log"] = str(kept) if kept else None
            else:
                item = summarize(result)
                for step in result["steps"]:
                    row = {key: step[key] for key in STEP_KEYS if key in step}
                    run.steps.append({"variant": variant.name, "heads": heads.label, **row, "events": step["events"]})
            run.summary.append(item)
            progress.note(_summary_line(label, item))
        run.summary += [{"variant": name, "heads": heads.label, "skipped": why} for name, why in plan.skipped.items()]


def _summary_line(label: str, item: dict) -> str:
    """One variant's result in a line, printed as soon as its worker is done."""
    if "error" in item:
        return f"  {label}: ERROR {item['error']}"
    split = ""
    if item.get("first_step_nograd_s") is not None:
        split = (
            f" (its no-grad passes {item['first_step_nograd_s']:.2f} s, training {item['first_step_train_s']:.2f} s)"
        )
    return (
        f"  {label}: first step {item['first_step_s']:.2f} s{split}, steady {item['steady_median_s'] * 1e3:.2f} ms, "
        f"stalls {item['stall_s']:.2f} s, {item['compiles_after_warmup']} compile(s) and "
        f"{item['autotunes_after_warmup']} autotune(s) after step 0"
    )


def _mode_words(mode: str) -> str:
    return "steps" if mode == "train" else f"rl steps ({NOGRAD_PASSES} no-grad forwards + forward+backward)"


def _refusal(problems: dict[str, str]) -> str:
    """Why the variants cannot run, in one line."""
    reasons = "; ".join(f"{name}: {reason}" for name, reason in problems.items())
    return f"{', '.join(problems)} cannot run here ({reasons})"


def main(args: argparse.Namespace) -> int:
    """Run `bench stream`; 0 when every variant ran, 1 when one (or the PNG) failed; StreamInputError for bad input."""
    plan = build_plan(args)
    problems = _problems(plan)
    if problems and len(problems) == len(plan.variants):
        raise StreamInputError(f"no variant can run: {_refusal(problems)}")
    if problems and not args.skip_unavailable:
        raise StreamInputError(f"{_refusal(problems)}; pass --skip-unavailable to run the others, or choose --variants")
    plan.skipped = problems
    plan.variants = [variant for variant in plan.variants if variant.name not in problems]
    packs = plan.packs.packs(plan.steps)
    tokens = [sum(p) for p in packs]
    print(
        f"bench stream: {plan.steps} {plan.level} {_mode_words(plan.mode)} per variant, "
        f"packs of {min(tokens)}-{max(tokens)} tokens in {min(map(len, packs))}-{max(map(len, packs))} sequences "
        f"(seed {plan.setup.seed}); variants "
        f"{', '.join(v.name for v in plan.variants)}; heads {', '.join(h.label for h in plan.heads)}",
        flush=True,
    )
    for name, reason in problems.items():
        print(f"  skipped {name}: {reason}", flush=True)
    import torch

    console = table_console(args.plain)
    env = environment(torch.device(plan.setup.device), "slime_flashqla.bench.stream")
    run = StreamRun()
    logs = KeptLogs(plan.outputs.get("json"), "slime-flashqla-stream-logs-")
    workdir = tempfile.TemporaryDirectory(prefix="slime-flashqla-stream-")
    try:
        with workdir as tmp, StreamProgress(console, plan.steps) as progress:
            run_plan(plan, Path(tmp), progress, run, logs)
    except KeyboardInterrupt:
        # Ctrl-C: what ran is kept, marked incomplete (SIGTERM, a container stopping, writes nothing).
        run.interrupted(packs)
        _report(plan, args, env, console, run, complete=False)
        raise
    return _report(plan, args, env, console, run, complete=True)


def _report(plan: StreamPlan, args, env: dict, console, run: StreamRun, complete: bool) -> int:
    """Print the table and write --json and --plot; 1 when a variant (or the PNG) failed."""
    steps, summary = run.steps, run.summary
    where = env["gpu"] or f"CPU ({env['cpu']})"
    title = f"bench stream on {where}: {plan.level}, {plan.steps} steps" + ("" if complete else " (INTERRUPTED)")
    print_table(console, title, SUMMARY_HEADERS, summary_cells(summary))
    if args.json:
        report = {
            "complete": complete,
            "environment": env,
            "settings": {
                **asdict(plan.packs),
                "steps": plan.steps,
                "level": plan.level,
                "mode": plan.mode,
                "dtype": plan.setup.dtype,
                "head_dim": plan.setup.head_dim,
                "hidden_size": plan.setup.hidden_size,
                "stall_factor": STALL_FACTOR,
            },
            "steps": [{k: v for k, v in step.items() if k != "events"} for step in steps],
            "events": [
                {"variant": s["variant"], "heads": s["heads"], "step": s["step"], **event}
                for s in steps
                for event in s["events"]
            ],
            "summary": summary,
        }
        write_output(plan.outputs["json"], json.dumps(report, indent=2) + "\n")
        print(f"wrote {args.json}" + ("" if complete else " (incomplete: interrupted)"), flush=True)
    if args.plot and complete:
        title = f"{plan.level} steps on {where}"
        problem = plot_steps(steps, plan.outputs["plot"], title) if steps else "no steps to plot"
        if problem:
            print(f"bench stream: {problem}; no PNG written", file=sys.stderr)
            return 1
        print(f"wrote {args.plot}")
    return 1 if any("error" in item for item in summary) else 0


def build_parser() -> argparse.ArgumentParser:
    """The standalone parser of `python -m slime_flashqla.bench.stream`."""
    return add_arguments(argparse.ArgumentParser(prog="python -m slime_flashqla.bench.stream"))


run = main  # the name `slime-flashqla bench` calls

if __name__ == "__main__":  # through the CLI, so that bad input is one line there too
    from slime_flashqla.cli import main as cli_main

    sys.exit(cli_main(["bench", "stream", *sys.argv[1:]]))
