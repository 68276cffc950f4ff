"""`slime-flashqla bench gdn`: median forward and forward+backward latency of the GDN kernel and layer per backend.

A row is one (level, shape, head config, mode, variant); the variants of one
(level, shape, head config, mode) form a group that shares its inputs, and each is
compared with `fla-repeat` (slime's default path) and with the group's fastest.
Run `python -m slime_flashqla.bench.gdn --help` for the options.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

from slime_flashqla.bench.gdn_report import (
    AUTO_HEADERS,
    TABLE_HEADERS,
    auto_cells,
    markdown_report,
    skipped_cells,
    table_cells,
)
from slime_flashqla.bench.gdn_rows import Plan, Row, round_sizes
from slime_flashqla.bench.gdn_shapes import (
    ALL_SHAPES,
    DEFAULT_HEADS,
    DEFAULT_SHAPES,
    TP_HEADS,
)
from slime_flashqla.bench.options import (
    MAX_HEAD_DIM,
    MAX_HIDDEN_SIZE,
    check_bounds,
    check_layer_sizes,
    check_seed,
    device_memory,
    layer_setup,
    output_paths,
    parse_device,
    write_output,
)
from slime_flashqla.bench.report import environment
from slime_flashqla.bench.variants import (
    DEFAULT_VARIANTS,
    VARIANTS,
    Variant,
    build_layer,
    input_bytes,
    kernel_call,
    kernel_fn,
    layer_call,
    random_inputs,
    variant_note,
    variant_problem,
)
from slime_flashqla.errors import UserError
from slime_flashqla.gdn.names import AUTO
from slime_flashqla.terminal import print_table, table_console
from slime_flashqla.workload.heads import MAX_HEADS, HeadConfig, HeadConfigError, parse_heads
from slime_flashqla.workload.lengths import ShapeError, ShapeSpec, parse_shapes
from slime_flashqla.workload.setup import DTYPES, LAYER_MODELS, LayerSetup

LEVELS = ("kernel", "layer")
MODES = ("fwd", "fwd+bwd")
BASELINE = "fla-repeat"
AUTO_TARGET = 1.03  # auto should be within 3% of the fastest variant of its group
TIMINGS = ("device", "queued")
MAX_CALLS = 100_000  # timed or warm-up calls per row: more is a run of days, not a benchmark


class BenchInputError(UserError, ValueError):
    """Bad command-line input, reported before any kernel runs."""


# ---------------------------------------------------------------- arguments


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the `bench gdn` options to a parser (the CLI sets `func` itself)."""
    parser.description = __doc__.splitlines()[0]
    parser.add_argument("--device", help="cuda, cuda:N or cpu (default: cuda when a GPU is present, else cpu)")
    parser.add_argument("--levels", default=",".join(LEVELS), help="comma list of kernel, layer (default both)")
    parser.add_argument(
        "--shapes",
        help=(
            "comma list of packed sequence lengths: AxB = B sequences of A tokens (1xN = one of N), A+B = explicit "
            f"lengths (default {','.join(DEFAULT_SHAPES)})"
        ),
    )
    parser.add_argument("--all-shapes", action="store_true", help=f"every shape: {','.join(ALL_SHAPES)}")
    parser.add_argument(
        "--heads",
        help=f"comma list of Hk/Hv head configs, Hv at most {MAX_HEADS} (default {','.join(DEFAULT_HEADS)}, "
        "Qwen3-Next at TP1-8)",
    )
    parser.add_argument("--tp-configs", action="store_true", help=f"every TP head config: {','.join(TP_HEADS)}")
    parser.add_argument(
        "--variants",
        default=",".join(DEFAULT_VARIANTS),
        help=f"comma list, or 'all', of {', '.join(VARIANTS)} (default {','.join(DEFAULT_VARIANTS)})",
    )
    parser.add_argument("--modes", default=",".join(MODES), help="comma list of fwd, fwd+bwd (default both)")
    parser.add_argument(
        "--dtype",
        choices=DTYPES,
        help="q/k/v and layer dtype (default bfloat16 on a GPU; float32 on the CPU, where bfloat16 convs are slow)",
    )
    parser.add_argument("--head-dim", type=int, default=128, help=f"K = V head size, 1 to {MAX_HEAD_DIM} (default 128)")
    parser.add_argument(
        "--layer-model",
        choices=LAYER_MODELS,
        default="qwen3-next",
        help="the GDN layer the layer level times: Qwen3-Next's fused projections or Qwen3.5's (default qwen3-next)",
    )
    parser.add_argument(
        "--slime-source",
        metavar="DIR",
        help="a slime checkout for the slime-layer-* variants (default: $SLIME_SOURCE, else importable slime_plugins)",
    )
    parser.add_argument(
        "--hidden-size",
        type=int,
        default=2048,
        help=f"layer hidden size, 1 to {MAX_HIDDEN_SIZE} (default 2048, Qwen3-Next)",
    )
    parser.add_argument(
        "--warmup", type=int, default=5, help=f"untimed calls before timing, at most {MAX_CALLS} (default 5)"
    )
    parser.add_argument(
        "--iters",
        type=int,
        default=30,
        help=f"timed calls per variant, 1 to {MAX_CALLS}; the median is reported (default 30)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=5,
        help="split the timed calls into this many rounds; each round times every variant of a shape in turn, "
        "in a rotating order (default 5)",
    )
    parser.add_argument(
        "--timing",
        choices=TIMINGS,
        default="device",
        help="GPU timing: device = the device's time per call, the host held ahead by a spin kernel, with the "
        "host's time per call beside it (default); queued = events around calls issued at the host's pace",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of the random inputs and layer weights, 0 to 2**64-1 (default 0)"
    )
    parser.add_argument(
        "--skip-unavailable",
        action="store_true",
        help="list variants that cannot run here as skipped (with the reason) instead of exiting with 2",
    )
    parser.add_argument("--dry-run", action="store_true", help="check the input and print the plan; run nothing")
    parser.add_argument("--json", metavar="PATH", help="write every row and the environment as JSON")
    parser.add_argument("--markdown", metavar="PATH", help="write the result tables as markdown")
    parser.add_argument("--plot", metavar="PATH.png", help="write a PNG of grouped bars (needs matplotlib)")
    parser.add_argument(
        "--plot-metric",
        choices=("speedup", "latency"),
        default="speedup",
        help="bar height: speedup vs fla-repeat (default) or median latency",
    )
    parser.add_argument("--plain", action="store_true", help="plain-text progress and tables even with rich")
    return parser


def _split(text: str) -> list[str]:
    return list(dict.fromkeys(item.strip() for item in text.split(",") if item.strip()))


def _choose(text: str, valid: tuple[str, ...], what: str) -> list[str]:
    items = _split(text)
    bad = [item for item in items if item not in valid]
    if bad or not items:
        raise BenchInputError(f"unknown {what} {', '.join(map(repr, bad)) or repr(text)}; valid: {', '.join(valid)}")
    return items


def build_plan(args: argparse.Namespace) -> Plan:
    """Parse and check the options; raise BenchInputError naming the first problem."""
    if args.shapes and args.all_shapes:
        raise BenchInputError("give --shapes or --all-shapes, not both")
    if args.heads and args.tp_configs:
        raise BenchInputError("give --heads or --tp-configs, not both")
    try:
        shapes = parse_shapes(args.shapes or ",".join(ALL_SHAPES if args.all_shapes else DEFAULT_SHAPES))
        heads = parse_heads(args.heads or ",".join(TP_HEADS if args.tp_configs else DEFAULT_HEADS))
    except (ShapeError, HeadConfigError) as error:
        raise BenchInputError(str(error)) from error
    names = list(VARIANTS) if args.variants.strip() == "all" else _choose(args.variants, tuple(VARIANTS), "variant")
    check_bounds(
        BenchInputError,
        ("--iters", args.iters, 1, MAX_CALLS),
        ("--rounds", args.rounds, 1, MAX_CALLS),
        ("--warmup", args.warmup, 0, MAX_CALLS),
    )
    check_layer_sizes(BenchInputError, args)
    check_seed(BenchInputError, args.seed)
    device = parse_device(args.device, BenchInputError)
    return Plan(
        setup=layer_setup(args, device),
        levels=_choose(args.levels, LEVELS, "level"),
        shapes=shapes,
        heads=heads,
        variants=[VARIANTS[name] for name in names],
        modes=_choose(args.modes, MODES, "mode"),
        warmup=args.warmup,
        iters=args.iters,
        rounds=args.rounds,
        timing=args.timing,
    )


# ---------------------------------------------------------------- availability


def check_memory(plan: Plan) -> None:
    """Refuse a plan whose largest group's inputs alone exceed the memory free on its device (BenchInputError)."""
    import torch

    free, where = device_memory(torch.device(plan.setup.device))
    if free is None:
        return
    groups = [(level, shape, heads) for level in plan.levels for shape in plan.shapes for heads in plan.heads]
    level, shape, heads = max(groups, key=lambda group: input_bytes(group[1].tokens, group[2], plan.setup, group[0]))
    need = input_bytes(shape.tokens, heads, plan.setup, level)
    if need > free:
        raise BenchInputError(
            f"--shapes {shape.label} at heads {heads.label}: the {level} inputs alone take {need / 2**30:.1f} GiB; "
            f"{where} {free / 2**30:.1f} GiB available: choose shorter --shapes, fewer --heads or a smaller "
            f"{'--hidden-size' if level == 'layer' else '--head-dim'}"
        )


def find_problems(plan: Plan) -> dict[tuple[str, str], str]:
    """{(variant, mode): reason} for every variant and mode that cannot run here (at any of the plan's levels)."""
    problems = {}
    for variant in plan.variants:
        levels = [level for level in plan.levels if level in variant.levels]
        for mode in plan.modes:
            # One check per variant and mode: the first head config stands for the others.
            level = levels[0] if levels else plan.levels[0]
            reason = variant_problem(variant, mode, plan.heads[0], plan.setup, level=level)
            if reason:
                problems[(variant.name, mode)] = reason
    return problems


# ---------------------------------------------------------------- measuring


def _auto_choice(auto, row: Row, plan: Plan, backward: bool):
    """The choice `auto` made for this row's inputs (choices are cached: asking again returns the one it ran)."""
    import torch

    from slime_flashqla.gdn import GDNShape

    dim = plan.setup.head_dim
    shape = GDNShape(1, row.tokens, row.key_heads, row.value_heads, dim, dim, len(row.lengths), True)
    return auto.choice_for(shape, getattr(torch, plan.setup.dtype), torch.device(plan.setup.device), backward)


def _free_memory(setup: LayerSetup) -> None:
    import gc

    import torch

    gc.collect()
    if setup.device_type == "cuda":
        torch.cuda.empty_cache()


def _row(level: str, shape: ShapeSpec, heads: HeadConfig, mode: str, variant: Variant, **fields) -> Row:
    return Row(
        level=level,
        shape=shape.label,
        lengths=list(shape.lengths),
        tokens=shape.tokens,
        key_heads=heads.key_heads,
        value_heads=heads.value_heads,
        mode=mode,
        variant=variant.name,
        backend=variant.backend,
        gva=not variant.repeat,
        **fields,
    )


def _prepare(level: str, variant: Variant, heads: HeadConfig, inputs: dict, backward: bool, layers: dict, plan: Plan):
    """The timed call of one row and the backend it calls; a layer is built on first use and kept in `layers`."""
    if level == "kernel":
        fn, backend_fn = kernel_fn(variant, heads)
        return kernel_call(fn, inputs, backward), backend_fn
    key = (heads, variant.name)
    if key not in layers:
        layers[key] = build_layer(variant, heads, plan.setup)
    return layer_call(layers[key], inputs, backward), layers[key].chunk_gated_delta_rule


def _error_reason(error: Exception) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"


def _time_group(entries: list, plan: Plan) -> None:
    """Time every (row, call) of one group in interleaved rounds and fill each row's timing."""
    import torch

    from slime_flashqla.bench.timing import device_samples, samples, summarize

    device = torch.device(plan.setup.device)
    taken: dict[int, list[float]] = {id(row): [] for row, _ in entries}
    host: dict[int, list[float]] = {id(row): [] for row, _ in entries}
    host_bound: dict[int, int] = {id(row): 0 for row, _ in entries}
    ahead = device.type == "cuda" and plan.timing == "device"

    def measure(row, call, size: int) -> None:
        if not ahead:
            taken[id(row)].extend(samples(call, device, size))
            return
        # The last round's host time sizes the next hold; 1 ms per call to begin with.
        result = device_samples(call, device, size, host[id(row)][-1] if host[id(row)] else 1.0)
        taken[id(row)].extend(result.device_ms)
        host[id(row)].append(result.host_ms)
        host_bound[id(row)] += not result.ahead

    live = list(entries)
    for r, size in enumerate(round_sizes(plan.iters, plan.rounds)):
        if not live:
            break
        # The order rotates from round to round: neither drift (clocks, temperature, the
        # host's other work) nor going first or last favours one variant of the group.
        shift = r % len(live)
        for row, call in live[shift:] + live[:shift]:
            try:
                measure(row, call, size)
            except Exception as error:  # one failing variant must not lose the rest of the group
                row.status, row.reason = "error", _error_reason(error)
                _free_memory(plan.setup)
        live = [(row, call) for row, call in live if row.status == "ok"]
    for row, call in live:
        if row.level == "layer" and device.type == "cuda":
            row.peak_mib = _peak_mib(call, device)
    for row, _ in entries:
        if row.status != "ok":
            continue
        timing = summarize(
            taken[id(row)],
            device,
            warmup=plan.warmup,
            host_ms=host[id(row)] if ahead else None,
            host_bound_rounds=host_bound[id(row)],
        )
        row.median_ms, row.min_ms, row.max_ms = timing.median_ms, timing.min_ms, timing.max_ms
        row.iters, row.warmup, row.timer = timing.iters, timing.warmup, timing.timer
        row.host_ms, row.host_bound_rounds = timing.host_ms, timing.host_bound_rounds
        row.tokens_per_s = row.tokens / (timing.median_ms / 1e3)


def _peak_mib(call, device) -> float:
    """MiB allocated at the peak of one call above what was allocated when it started (a step's working set)."""
    import torch

    torch.cuda.synchronize(device)
    start = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    call()
    torch.cuda.synchronize(device)
    return (torch.cuda.max_memory_allocated(device) - start) / 2**20


def _run_group(level, shape, heads, mode, inputs, layers, plan, problems) -> list[Row]:
    """Prepare and warm every variant of one group, then time them together."""
    import torch

    from slime_flashqla.bench.timing import warm

    device = torch.device(plan.setup.device)
    backward = mode == "fwd+bwd"
    rows, entries = [], []
    for variant in plan.variants:
        # The first head config, as in find_problems: this call adds only the group's level.
        reason = problems.get((variant.name, mode)) or variant_problem(
            variant, mode, plan.heads[0], plan.setup, level=level
        )
        if reason:
            rows.append(_row(level, shape, heads, mode, variant, status="skipped", reason=reason))
            continue
        row = _row(level, shape, heads, mode, variant, note=variant_note(variant))
        rows.append(row)
        backend_fn = None
        try:
            call, backend_fn = _prepare(level, variant, heads, inputs, backward, layers, plan)
            warm(call, device, plan.warmup)
        except Exception as error:  # OOM, a kernel error: record it and go on with the others
            row.status, row.reason = "error", _error_reason(error)
            _free_memory(plan.setup)
            continue
        entries.append((row, call))
        if variant.backend == AUTO:
            row.auto_backend = _auto_choice(backend_fn, row, plan, backward).backend
    _time_group(entries, plan)
    return rows


def _failed_group(level, shape, heads, mode, plan, problems, reason: str) -> list[Row]:
    """The rows of a group whose inputs could not be made: skipped where a variant cannot run, else errors."""
    rows = []
    for variant in plan.variants:
        skipped = problems.get((variant.name, mode)) or variant_problem(
            variant, mode, plan.heads[0], plan.setup, level=level
        )
        if skipped:
            rows.append(_row(level, shape, heads, mode, variant, status="skipped", reason=skipped))
        else:
            rows.append(_row(level, shape, heads, mode, variant, status="error", reason=reason))
    return rows


def run_plan(plan: Plan, problems: dict[tuple[str, str], str], progress) -> list[Row]:
    """Measure every runnable row; `progress(row)` is called after each row's group is measured."""
    rows = []
    for level in plan.levels:
        layers: dict[tuple, object] = {}  # built once per (heads, variant), reused across shapes
        for shape in plan.shapes:
            for heads in plan.heads:
                try:
                    inputs = random_inputs(shape.lengths, heads, plan.setup, level)
                except Exception as error:  # out of memory: every row of the group says so, the run goes on
                    _free_memory(plan.setup)
                    reason = f"building the inputs: {_error_reason(error)}"
                    for mode in plan.modes:
                        group = _failed_group(level, shape, heads, mode, plan, problems, reason)
                        for row in group:
                            if row.status != "skipped":
                                progress(row)
                        rows += group
                    continue
                for mode in plan.modes:
                    group = _run_group(level, shape, heads, mode, inputs, layers, plan, problems)
                    for row in group:
                        if row.status != "skipped":
                            progress(row)
                    rows += group
                del inputs
                _free_memory(plan.setup)
        layers.clear()
        _free_memory(plan.setup)
    return rows


# ---------------------------------------------------------------- results


def add_speedups(rows: list[Row]) -> None:
    """Fill speedup_vs_fla_repeat and speedup_vs_fastest (> 1 = faster) within each group."""
    groups: dict[tuple, list[Row]] = defaultdict(list)
    for row in rows:
        if row.status == "ok" and row.median_ms:
            groups[row.group].append(row)
    for members in groups.values():
        fastest = min(row.median_ms for row in members)
        baseline = next((row.median_ms for row in members if row.variant == BASELINE), None)
        for row in members:
            row.speedup_vs_fastest = fastest / row.median_ms
            row.speedup_vs_fla_repeat = baseline / row.median_ms if baseline else None


def auto_summary(rows: list[Row]) -> list[dict]:
    """Per group with an `auto` row: what it picked, the fastest other variant, and auto's time ratio to it."""
    groups: dict[tuple, list[Row]] = defaultdict(list)
    for row in rows:
        if row.status == "ok" and row.median_ms:
            groups[row.group].append(row)
    summary = []
    for (level, shape, heads, mode), members in groups.items():
        auto = next((row for row in members if row.variant == AUTO), None)
        others = [row for row in members if row.variant != AUTO]
        if auto is None or not others:
            continue
        best = min(others, key=lambda row: row.median_ms)
        ratio = auto.median_ms / best.median_ms
        same_form = auto.gva == best.gva  # auto passes q/k with their own heads, as the GVA variants do
        summary.append(
            {
                "level": level,
                "shape": shape,
                "heads": heads,
                "mode": mode,
                "auto_backend": auto.auto_backend,
                "auto_ms": auto.median_ms,
                "fastest_variant": best.variant,
                "fastest_ms": best.median_ms,
                "auto_vs_fastest": ratio,
                "auto_host_ms": auto.host_ms,
                "fastest_host_ms": best.host_ms,
                "auto_host_vs_fastest": auto.host_ms / best.host_ms if auto.host_ms and best.host_ms else None,
                "picked_fastest_backend": auto.auto_backend == best.backend,
                "picked_fastest_variant": auto.auto_backend == best.backend and same_form,
                "within_target": ratio <= AUTO_TARGET,
            }
        )
    return summary


def settings(plan: Plan) -> dict:
    """The parsed plan, as JSON."""
    return {
        "levels": plan.levels,
        "shapes": {shape.label: list(shape.lengths) for shape in plan.shapes},
        "heads": [heads.label for heads in plan.heads],
        "variants": [variant.name for variant in plan.variants],
        "modes": plan.modes,
        "head_dim": plan.setup.head_dim,
        "hidden_size": plan.setup.hidden_size,
        "warmup": plan.warmup,
        "iters": plan.iters,
        "rounds": plan.rounds_used,
        "timing": plan.timing if plan.setup.device_type == "cuda" else "perf_counter",
        "seed": plan.setup.seed,
        "dtype": f"{plan.setup.dtype} q/k/v/beta and layer, float32 g",
        "use_qk_l2norm_in_kernel": True,
        "auto_target": AUTO_TARGET,
    }


# ---------------------------------------------------------------- output


@contextmanager
def _progress(total: int, console):
    """Yield a callback(row) that advances a rich progress bar, or prints a line per row."""
    done = [0]

    def describe(row: Row) -> str:
        timing = f"{row.median_ms:.3f} ms" if row.median_ms is not None else row.status.upper()
        return f"{row.level} {row.shape} {row.heads} {row.mode} {row.variant}: {timing}"

    if console is None or not console.is_terminal:  # a log or a pipe: rich's bar would draw nothing there

        def plain(row: Row) -> None:
            done[0] += 1
            print(f"[{done[0]}/{total}] {describe(row)}", flush=True)

        yield plain
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    ) as bar:
        task = bar.add_task("bench gdn", total=total)
        yield lambda row: bar.update(task, advance=1, description=describe(row))


def _unavailable(problems: dict[tuple[str, str], str]) -> str:
    """The variants that cannot run and why, in one line."""
    return "; ".join(f"{variant} ({mode}): {reason}" for (variant, mode), reason in problems.items())


def _print_plan(plan: Plan, problems: dict, skipping: bool) -> None:
    import torch

    from slime_flashqla.gdn import explain_auto

    print(
        f"plan: {plan.num_rows} rows = levels {','.join(plan.levels)} x shapes "
        f"{','.join(s.label for s in plan.shapes)} x heads {','.join(h.label for h in plan.heads)} x modes "
        f"{','.join(plan.modes)} x variants {','.join(v.name for v in plan.variants)}"
    )
    for (variant, mode), reason in problems.items():
        print(f"  {'skipped' if skipping else 'cannot run here:'} {variant} ({mode}): {reason}")
    if any(v.backend == AUTO for v in plan.variants):
        for heads in plan.heads:
            for mode in plan.modes:
                choice = explain_auto(
                    torch.device(plan.setup.device),
                    dtype=getattr(torch, plan.setup.dtype),
                    key_heads=heads.key_heads,
                    value_heads=heads.value_heads,
                    key_dim=plan.setup.head_dim,
                    value_dim=plan.setup.head_dim,
                    backward=mode == "fwd+bwd",
                )
                print(f"  auto {heads.label} {mode} -> {choice.backend}: {choice.reason}")


def _write_json(path: Path, rows: list[Row], plan: Plan, env: dict, *, complete: bool) -> None:
    """Write the report; `complete` is False while the run is still going (speedups are then missing)."""
    report = {
        "complete": complete,
        "environment": env,
        "settings": settings(plan),
        "rows": [dataclasses.asdict(row) for row in rows],
        "auto": auto_summary(rows) if complete else [],
    }
    write_output(path, json.dumps(report, indent=2) + "\n")


def main(args: argparse.Namespace) -> int:
    """Run `bench gdn`; 0 when every row ran, 1 when a row or the PNG failed; BenchInputError for bad input."""
    plan = build_plan(args)
    outputs = output_paths(args, BenchInputError, ("json", "markdown", "plot"))
    check_memory(plan)
    problems = find_problems(plan)
    refusal = None
    if len(problems) == len(plan.variants) * len(plan.modes):
        refusal = f"no variant can run on this machine: {_unavailable(problems)}"
    elif problems and not args.skip_unavailable:
        refusal = (
            f"these variants cannot run on this machine: {_unavailable(problems)}; "
            "pass --skip-unavailable to benchmark the others, or choose --variants"
        )
    if args.dry_run:  # the plan and what cannot run here, then the verdict the run would get
        _print_plan(plan, problems, skipping=args.skip_unavailable and refusal is None)
        if refusal:
            raise BenchInputError(refusal)
        return 0
    if refusal:
        raise BenchInputError(refusal)
    _print_plan(plan, problems, skipping=True)
    if plan.setup.device_type == "cuda" and plan.iters < 20:
        print(f"bench gdn: note: --iters {plan.iters} < 20 timed calls per row; the medians will be noisy")
    import torch

    device = torch.device(plan.setup.device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    console = table_console(args.plain)
    env = environment(device, "slime_flashqla.bench.gdn")
    runnable = plan.num_rows - len(problems) * len(plan.levels) * len(plan.shapes) * len(plan.heads)
    done: list[Row] = []
    with _progress(runnable, console) as progress:

        def on_row(row: Row) -> None:
            progress(row)
            if args.json:  # rows so far survive a run that is killed (a time limit) before the end
                done.append(row)
                _write_json(outputs["json"], done, plan, env, complete=False)

        rows = run_plan(plan, problems, on_row)
    add_speedups(rows)
    summary = auto_summary(rows)
    where = env["gpu"] or f"CPU ({env['cpu']})"
    title = f"bench gdn on {where}: median of {plan.iters} calls in {plan.rounds_used} rounds"
    print_table(console, title, TABLE_HEADERS, table_cells(rows))
    if summary:
        hits = sum(item["within_target"] for item in summary)
        title = f"auto vs the fastest other variant (target: within 3%): {hits}/{len(summary)} groups"
        print_table(console, title, AUTO_HEADERS, auto_cells(summary))
    if skipped_cells(rows):
        print_table(console, "skipped variants", ("variant", "mode", "reason"), skipped_cells(rows))
    if args.json:
        _write_json(outputs["json"], rows, plan, env, complete=True)
        print(f"wrote {args.json}")
    if args.markdown:
        write_output(outputs["markdown"], markdown_report(rows, summary, env, plan))
        print(f"wrote {args.markdown}")
    problem = None
    if args.plot:
        from slime_flashqla.bench.plot import plot_rows

        problem = plot_rows([dataclasses.asdict(row) for row in rows], outputs["plot"], args.plot_metric, title=where)
        if problem:  # nothing measured to draw: the PNG asked for is not written, and the exit status says so
            print(f"bench gdn: {problem}; no PNG written", file=sys.stderr)
        else:
            print(f"wrote {args.plot}")
    failed = [row for row in rows if row.status == "error"]
    if failed:
        print(f"bench gdn: {len(failed)} row(s) failed; see the ERROR notes", file=sys.stderr)
    return 1 if failed or problem else 0


def build_parser() -> argparse.ArgumentParser:
    """The standalone parser of `python -m slime_flashqla.bench.gdn`."""
    return add_arguments(argparse.ArgumentParser(prog="python -m slime_flashqla.bench.gdn"))


run = main  # the name `slime-flashqla bench` calls

if __name__ == "__main__":  # through the CLI, so that bad input is one line there too
    from slime_flashqla.cli import main as cli_main

    sys.exit(cli_main(["bench", "gdn", *sys.argv[1:]]))
