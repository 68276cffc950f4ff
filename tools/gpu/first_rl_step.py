"""Where a warm fresh process's first RL step goes (issue 31), on a GPU node after `slime-flashqla warmup`.

    python3 tools/gpu/first_rl_step.py --heads 16/32 --lengths 8192+24576 --runs 3 --json first_rl_step.json

Each run is a fresh `python -X importtime` process (`--no-importtime`: a plain one) that does
what a training rank does up to the end of its first RL step (slime's actor: two forward-only
passes under no_grad, then forward+backward), then one more step for reference, and times, from
the process start:

- the interpreter, `import torch`, this package, and (`--imports upfront`) each kernel package
  import apart (triton layer ops, flash_qla with tilelang, FLA), else nothing before the model;
- CUDA init and the layer (its construction starts the kernel preload thread);
- each pass of step 0 and of step 1, and inside each: TileLang program rebuilds (`get_tir`: the
  factory's Python front end run again for a specialisation the process had not built), TileLang
  cache loads (`_load_kernel_from_disk`), TileLang compiles, Triton compiles and cache loads
  (`triton.compile`), Triton module loads (`CompiledKernel._init_handles`), the imports that
  happened inside the pass (`-X importtime` lines between markers, by package), on the training
  thread and, apart, on the preload thread while the pass ran;
- what the preload did and when it finished against step 0.

The table per run and the median of each row over the runs show which of these to move out of
the first step. `--preload 1,0` runs each setting of SLIME_FLASHQLA_PRELOAD in turn. On a CPU,
`--device cpu` runs the torch backend at small sizes as a smoke test (tests/runtime/bench).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

MARK = "FIRST_RL_STEP_MARK"  # written to stderr, between the -X importtime lines, at each phase edge
NOGRAD_PASSES = 2


# ---------------------------------------------------------------------------------------------
# The child: one fresh process, instrumented before anything imports the kernel packages.
# ---------------------------------------------------------------------------------------------
class Timings:
    """Calls of the hooked functions: (what, thread name, start, end), perf_counter seconds."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, float, float]] = []
        self.lock = threading.Lock()

    def timed(self, what: str, function):
        timings = self

        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                with timings.lock:
                    timings.events.append((what, threading.current_thread().name, start, time.perf_counter()))

        wrapper.__wrapped__ = function
        return wrapper


def _patch_tilelang_jit(timings: Timings) -> None:
    from tilelang.jit import JITImpl

    JITImpl.get_tir = timings.timed("tilelang program rebuild", JITImpl.get_tir)


def _patch_tilelang_cache(timings: Timings) -> None:
    from tilelang.cache.kernel_cache import KernelCache

    KernelCache._load_kernel_from_disk = timings.timed("tilelang cache load", KernelCache._load_kernel_from_disk)


def _patch_triton(timings: Timings) -> None:
    import triton.compiler.compiler as compiler

    # Patched before triton.compiler's __init__ re-exports it, which is where JITFunction takes it from.
    compiler.compile = timings.timed("triton compile or cache load", compiler.compile)
    compiler.CompiledKernel._init_handles = timings.timed("triton module load", compiler.CompiledKernel._init_handles)


class _AfterImport:
    """A meta path finder that patches a module right after it is first executed (works for lazy imports)."""

    def __init__(self, patches: dict) -> None:
        self.patches = patches

    def find_spec(self, name, path=None, target=None):
        if name not in self.patches:
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            spec = finder.find_spec(name, path, target) if hasattr(finder, "find_spec") else None
            if spec is not None and spec.loader is not None:
                loader, patch = spec.loader, self.patches.pop(name)
                real_exec = loader.exec_module

                def exec_module(module, real_exec=real_exec, patch=patch):
                    real_exec(module)
                    patch()

                loader.exec_module = exec_module
                return spec
        return None


def _start_profile():
    import cProfile

    profiler = cProfile.Profile()
    profiler.enable()
    return profiler


def _profile_rows(profiler, count: int = 30) -> dict[str, list]:
    """The training thread's heaviest functions of one pass: by cumulative and by own time (ms)."""
    import pstats

    from slime_flashqla.bench.timing import cprofile_rows

    profiler.disable()
    stats = pstats.Stats(profiler).stats
    return {order: cprofile_rows(stats, order, count) for order in ("cumulative", "own")}


def child(args) -> int:
    """Run the first two RL steps in this fresh process; print one JSON line."""
    started_wall = time.time()
    t0 = time.perf_counter()
    phases: list[tuple[str, float, float]] = []
    last = [t0]

    def mark(name: str) -> None:
        now = time.perf_counter()
        phases.append((name, last[0], now))
        last[0] = now
        print(f"{MARK} {name}", file=sys.stderr, flush=True)

    timings = Timings()
    finder = _AfterImport(
        {
            # Each right after its own module ran: tilelang.jit imports the cache while it initialises.
            "tilelang.jit": lambda: _patch_tilelang_jit(timings),
            "tilelang.cache.kernel_cache": lambda: _patch_tilelang_cache(timings),
            "triton.compiler.compiler": lambda: _patch_triton(timings),
        }
    )
    sys.meta_path.insert(0, finder)
    os.environ.setdefault("TILELANG_PRINT_ON_COMPILATION", "1")
    os.environ.setdefault("TRITON_PRINT_AUTOTUNING", "1")
    from slime_flashqla.kernels.compile_log import CompileLog

    log = CompileLog().install()
    mark("interpreter, compile hooks (import triton)")
    import torch

    mark("import torch")
    from slime_flashqla.bench.variants import VARIANTS, build_layer, layer_call, random_inputs
    from slime_flashqla.workload.heads import parse_head_config
    from slime_flashqla.workload.setup import LayerSetup

    mark("import slime_flashqla")
    kernel_imports = {}
    if args.imports == "upfront":
        from slime_flashqla.kernels.imports import import_kernel_packages

        kernel_imports = import_kernel_packages(args.backend)
        mark("kernel package imports (upfront)")
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.cuda.init()
        torch.ones(1, device=device).add_(1)
        torch.cuda.synchronize()
    heads = parse_head_config(args.heads)
    dtype = "bfloat16" if device.type == "cuda" else "float32"
    setup = LayerSetup(args.device, dtype, args.head_dim, args.hidden_size, 0)
    variant = next(v for v in VARIANTS.values() if v.backend == args.backend and not (v.repeat or v.direct))
    layer = build_layer(variant, heads, setup)  # starts the kernel preload
    lengths = [int(n) for n in args.lengths.split("+")]
    generator = torch.Generator(device=device).manual_seed(0)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    inputs = random_inputs(lengths, heads, setup, "layer", generator)
    sync()
    mark("cuda init, layer and inputs")
    log.take()
    compiles = {}
    profiles = {}
    for step in (0, 1):
        forward_only, train = layer_call(layer, inputs, False), layer_call(layer, inputs, True)
        for index, call in enumerate([forward_only] * NOGRAD_PASSES + [train]):
            profiler = _start_profile() if args.profile and step == 0 else None
            call()
            sync()
            if profiler is not None:
                profiles[f"step 0 pass {index + 1}"] = _profile_rows(profiler)
            name = f"step {step} " + (f"no-grad #{index + 1}" if index < NOGRAD_PASSES else "train")
            mark(name)
            compiles[name] = [f"{event.kind} {event.name}" for event in log.take()]
        if step == 0:
            first_step_end = time.time()
    from slime_flashqla.kernels import preload

    preloads = []
    for preloader in preload._preloaders.values():
        done = preloader.wait(300)
        result = preloader.result
        preloads.append(
            {"label": preloader.label, "done": done, "loaded": result.loaded, "present": result.present,
             "programs": result.programs, "skipped": len(result.skipped), "note": result.note,
             "seconds": result.seconds, "finished_after_step0_s": result.finished - first_step_end if done else None}
        )  # fmt: skip
    report = {
        "started_wall": started_wall,
        "first_step_end_wall": first_step_end,
        "t0": t0,
        "phases": phases,
        "events": timings.events,
        "compiles": compiles,
        "kernel_imports": kernel_imports,
        "preloads": preloads,
        "main_thread": threading.main_thread().name,
        "profiles": profiles,
    }
    print("FIRST_RL_STEP " + json.dumps(report), flush=True)
    return 0


# ---------------------------------------------------------------------------------------------
# The parent: runs the children, attributes what they did to the phases, prints the tables.
# ---------------------------------------------------------------------------------------------
def imports_between_marks(stderr: list[str]) -> dict[str, dict[str, float]]:
    """{phase: {top-level package: seconds}} from the -X importtime lines before each phase's end mark."""
    from slime_flashqla.bench.first_step import IMPORT_TIME

    found: dict[str, dict[str, float]] = {}
    current: dict[str, float] = {}
    for line in stderr:
        if line.startswith(MARK + " "):
            found[line[len(MARK) + 1 :].strip()] = current
            current = {}
            continue
        match = IMPORT_TIME.match(line)
        if match:
            package = match.group(4).split(".")[0]
            current[package] = current.get(package, 0.0) + int(match.group(1)) / 1e6
    return found


def attribute(report: dict, imports: dict) -> list[dict]:
    """One row per phase: its seconds and, inside it, what the hooks saw on the training and the other threads."""
    rows = []
    for name, start, end in report["phases"]:
        row = {"phase": name, "seconds": end - start, "main": {}, "other": {}, "imports": imports.get(name, {})}
        for what, thread, began, ended in report["events"]:
            overlap = min(end, ended) - max(start, began)
            if overlap <= 0:
                continue
            side = row["main"] if thread == report["main_thread"] else row["other"]
            count, seconds = side.get(what, (0, 0.0))
            side[what] = (count + 1, seconds + overlap)
        row["compiles"] = report["compiles"].get(name, [])
        rows.append(row)
    return rows


def run_once(args, preload: str) -> dict:
    """One fresh child; its report with rows per phase."""
    env = {**os.environ, "SLIME_FLASHQLA_PRELOAD": preload, "PYTHONUNBUFFERED": "1"}
    argv = [sys.executable, *(["-X", "importtime"] * args.importtime), __file__, "_child", "--backend", args.backend,
            "--heads", args.heads, "--lengths", args.lengths, "--device", args.device, "--imports", args.imports,
            "--head-dim", str(args.head_dim), "--hidden-size", str(args.hidden_size)]  # fmt: skip
    if args.profile:
        argv.append("--profile")
    spawned = time.time()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=args.timeout)
    stderr = done.stderr.splitlines()
    line = next((line for line in done.stdout.splitlines() if line.startswith("FIRST_RL_STEP ")), None)
    if done.returncode or line is None:
        tail = [line for line in stderr if not line.startswith(("import time:", MARK))][-15:]
        raise RuntimeError(f"the child exited with {done.returncode}:\n" + "\n".join(tail))
    report = json.loads(line.removeprefix("FIRST_RL_STEP "))
    rows = attribute(report, imports_between_marks(stderr))
    rows[0]["seconds"] += report["started_wall"] - spawned  # the interpreter's start before the child's first line
    return {
        "preload": preload,
        "to_end_of_first_rl_step_s": report["first_step_end_wall"] - spawned,
        "rows": rows,
        "kernel_imports": report["kernel_imports"],
        "preloads": report["preloads"],
        "profiles": report["profiles"],
    }


def _inside(row: dict, side: str) -> str:
    parts = [f"{what} x{count} {seconds:.2f} s" for what, (count, seconds) in sorted(row[side].items())]
    return "; ".join(parts)


def print_run(run: dict) -> None:
    """The table of one run."""
    total = run["to_end_of_first_rl_step_s"]
    print(f"\nSLIME_FLASHQLA_PRELOAD={run['preload']}: to the end of the first RL step {total:.2f} s")
    print("| phase | s | training thread: inside it | preload thread meanwhile | imports inside it | compiles |")
    print("| --- | --- | --- | --- | --- | --- |")
    for row in run["rows"]:
        imports = sorted(row["imports"].items(), key=lambda item: -item[1])
        shown = ", ".join(f"{name} {seconds:.2f}" for name, seconds in imports[:4] if seconds >= 0.01)
        print(
            f"| {row['phase']} | {row['seconds']:.3f} | {_inside(row, 'main') or '-'} | {_inside(row, 'other') or '-'} "
            f"| {shown or '-'} | {len(row['compiles'])} |"
        )
    for item in run["preloads"]:
        after = item["finished_after_step0_s"]
        print(
            f"preload {item['label']}: {item['loaded']} loaded ({item['programs']} from recorded programs), "
            f"{item['present']} already loaded, {item['skipped']} skipped, {item['seconds']:.2f} s, finished "
            + ("-" if after is None else f"{after:+.2f} s after the end of step 0")
            + (f"; {item['note']}" if item["note"] else "")
        )
    for name, tops in run.get("profiles", {}).items():
        for order, rows in tops.items():
            print(f"\nprofile of {name}, training thread, by {order} time (cumulative ms, own ms, calls, function):")
            for function, calls, own, cumulative in rows:
                print(f"  {cumulative:9.1f} {own:9.1f} {calls:7.0f} {function}")
    if run["kernel_imports"]:
        print("kernel imports (upfront): " + ", ".join(f"{k} {v:.2f} s" for k, v in run["kernel_imports"].items()))


def print_medians(runs: list[dict]) -> None:
    """Median seconds of each phase over the runs of each preload setting."""
    for preload in dict.fromkeys(run["preload"] for run in runs):
        mine = [run for run in runs if run["preload"] == preload]
        print(f"\nmedians over {len(mine)} run(s), SLIME_FLASHQLA_PRELOAD={preload}:")
        print("| phase | median s |")
        print("| --- | --- |")
        for index, row in enumerate(mine[0]["rows"]):
            print(f"| {row['phase']} | {statistics.median(run['rows'][index]['seconds'] for run in mine):.3f} |")
        total = statistics.median(run["to_end_of_first_rl_step_s"] for run in mine)
        print(f"| to the end of the first RL step | {total:.3f} |")


def main(argv=None) -> int:
    """Run the children and print the tables; one line and exit 2 where it cannot run."""
    parser = argparse.ArgumentParser(prog="python3 tools/gpu/first_rl_step.py", description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default=None, help="GDN backend (default auto on a GPU, torch on a CPU)")
    parser.add_argument("--heads", default="16/32", help="Hk/Hv (default 16/32)")
    parser.add_argument("--lengths", default="8192+24576", help="the pack, '+'-joined lengths (default 8192+24576)")
    parser.add_argument("--device", default="cuda", help="cuda (default), or cpu for a smoke test")
    parser.add_argument("--imports", choices=("lazy", "upfront"), default="lazy",
                        help="lazy: nothing imported before the model, as a training rank (default); upfront: the "
                        "kernel packages imported and timed before the model")  # fmt: skip
    parser.add_argument("--preload", default="1", help="comma list of SLIME_FLASHQLA_PRELOAD settings (default 1)")
    parser.add_argument("--runs", type=int, default=3, help="fresh processes per setting (default 3)")
    parser.add_argument("--head-dim", type=int, default=128, help="K = V (default 128)")
    parser.add_argument("--hidden-size", type=int, default=2048, help="hidden size (default 2048)")
    parser.add_argument("--importtime", action=argparse.BooleanOptionalAction, default=True,
                        help="run the children under -X importtime (default), whose own cost inflates the imports; "
                        "--no-importtime times a plain process (no imports column)")  # fmt: skip
    parser.add_argument("--profile", action="store_true",
                        help="cProfile step 0 on the training thread; print its heaviest functions")  # fmt: skip
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds a run may take (default 900)")
    parser.add_argument("--json", help="write every run as JSON")
    if argv is None and sys.argv[1:2] == ["_child"]:
        args = parser.parse_args(sys.argv[2:])
        return child(args)
    args = parser.parse_args(argv)
    args.backend = args.backend or ("torch" if args.device == "cpu" else "auto")
    if args.device != "cpu":
        import torch

        if not torch.cuda.is_available():
            print(f"{parser.prog}: needs a CUDA GPU (or --device cpu for a smoke test)", file=sys.stderr)
            return 2
    if args.runs < 1:
        print(f"{parser.prog}: --runs must be at least 1, got {args.runs}", file=sys.stderr)
        return 2
    runs = []
    for preload in args.preload.split(","):
        for _ in range(args.runs):
            try:
                run = run_once(args, preload.strip())
            except RuntimeError as error:
                print(f"{parser.prog}: {error}", file=sys.stderr)
                return 1
            print_run(run)
            runs.append(run)
    print_medians(runs)
    if args.json:
        Path(args.json).write_text(json.dumps({"settings": vars(args), "runs": runs}, indent=1) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
