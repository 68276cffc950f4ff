"""Time to the first GDN layer forward+backward in a fresh process (cold vs warm kernel cache).

`python -m slime_flashqla.bench.first_step --backend flashqla --heads 16/32 --lengths 8192+24576`
starts a new Python process that imports torch and the kernel packages, builds a Qwen3-Next
GDN layer and runs one forward+backward. It reports the time from the process start to the
end of that step (`to_first_step_s`), the first forward+backward alone (`first_fwd_bwd_s`),
every phase between, with each kernel package import timed apart, and every import second
by top-level package (from `python -X importtime`, each module's own time counted once).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from slime_flashqla.files.child_logs import exit_words

CHILD = """
import json, logging, sys, time
started = time.time()
t0 = time.perf_counter()
phases = {}
compiled = []


class CompileLog(logging.Handler):
    # TileLang logs 'TileLang begins to compile kernel `name`' only when it really compiles
    # (not when it loads a kernel from its disk cache).
    def emit(self, record):
        message = record.getMessage()
        if 'begins to compile kernel' in message:
            compiled.append(message.split('`')[1] if '`' in message else message)


def mark(name):
    global t0
    now = time.perf_counter()
    phases[name] = round(now - t0, 3)
    t0 = now


# TileLang's module loggers ('tilelang.jit.kernel', ...) end at the 'tilelang' logger.
logging.getLogger('tilelang').addHandler(CompileLog())
logging.getLogger('tilelang').setLevel(logging.INFO)  # what TileLang sets itself on import
import torch
backend, hk, hv, lengths = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), [int(n) for n in sys.argv[4].split('+')]
from slime_flashqla.layers import Qwen3NextGatedDeltaNet, init_like_checkpoint, packed_batch
from slime_flashqla.workload.models import gdn_layer_config
from slime_flashqla.gdn import get_chunk_gated_delta_rule
from slime_flashqla.kernels.imports import import_kernel_packages
get_chunk_gated_delta_rule(backend)  # resolves the backend name; kernel packages load lazily
mark('import')
# What the first forward would otherwise import lazily (FLA, FlashQLA), as a job that builds
# its model first does: the forward and backward below then time the step itself.
kernel_imports = import_kernel_packages(backend)
mark('kernel packages')
torch.cuda.init()
layer = Qwen3NextGatedDeltaNet(gdn_layer_config(hk, hv), backend=backend).to('cuda', torch.bfloat16)
init_like_checkpoint(layer)
x, cu_seqlens = packed_batch(lengths, layer.config.hidden_size, device='cuda', dtype=torch.bfloat16)
torch.cuda.synchronize()
mark('cuda init and layer')
y = layer(x, cu_seqlens=cu_seqlens)
torch.cuda.synchronize()
mark('forward')
y.float().square().mean().backward()
torch.cuda.synchronize()
mark('backward')
finished = time.time()
assert torch.isfinite(x.grad).all()
dynamo = sys.modules.get('torch._dynamo.utils')  # imported by whatever used torch.compile
frames = dynamo.counters['frames']['total'] if dynamo else 0
report = {'phases': phases, 'kernel_imports': kernel_imports, 'compiled_kernels': compiled,
          'torch_compile_frames': frames,
          'started': started, 'finished': finished}
print('FIRST_STEP ' + json.dumps(report), flush=True)
"""


SHOWN_SECONDS = 0.01  # packages below this are summed under OTHER
OTHER = "(packages under 10 ms each)"
IMPORT_TIME = re.compile(r"^import time:\s+(\d+)\s+\|\s+(\d+)\s+\|(\s*)(\S+)")


def imports_by_package(importtime_lines: list[str]) -> dict[str, float]:
    """Seconds of import by top-level package from `-X importtime` lines, largest first.

    Each module's own ("self") time is counted once, under the package its name starts with,
    so nested imports are not counted twice and the values add up to the whole import time;
    packages under 10 ms are summed in one entry.
    """
    seconds: dict[str, float] = {}
    for line in importtime_lines:
        match = IMPORT_TIME.match(line)
        if match:
            package = match.group(4).split(".")[0]
            seconds[package] = seconds.get(package, 0.0) + int(match.group(1)) / 1e6
    ranked = sorted(seconds.items(), key=lambda item: -item[1])
    # Hundreds of standard-library modules take microseconds each: one line for all of them.
    shown = {name: round(value, 3) for name, value in ranked if value >= SHOWN_SECONDS}
    rest = sum(value for _, value in ranked if value < SHOWN_SECONDS)
    return {**shown, OTHER: round(rest, 3)} if rest else shown


def time_first_step(backend: str, heads: str, lengths: str, profile: str | None = None) -> dict:
    """Seconds from starting a fresh Python process to its first layer forward+backward, with phases and exit."""
    hk, hv = heads.split("/")
    # TileLang logs each real compile when this is on (its default); loads from cache stay silent.
    env = {**os.environ, "TILELANG_PRINT_ON_COMPILATION": "1"}
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "first_step_child.py"
        script.write_text(CHILD)
        profiler = ["-m", "cProfile", "-o", profile] if profile else []
        command = [sys.executable, "-X", "importtime", *profiler, str(script)]
        start = time.time()
        argv = [*command, backend, hk, hv, lengths]
        child = subprocess.run(argv, env=env, capture_output=True, text=True)
        seconds = time.time() - start
    report = {}
    for line in child.stdout.splitlines():
        if line.startswith("FIRST_STEP "):
            report = json.loads(line.removeprefix("FIRST_STEP "))
        else:
            print(line)
    stderr = child.stderr.splitlines()
    for line in stderr:
        if not line.startswith("import time:"):
            print(line, file=sys.stderr)
    if child.returncode:  # after its output is shown: the reason a failed child died
        raise ChildFailed(f"the measuring process {exit_words(child.returncode)} (its output is above)")
    report["imports_by_package"] = imports_by_package(stderr)
    finished = report.pop("finished")
    phases = {"interpreter start": round(report.pop("started") - start, 3), **report["phases"]}
    phases["interpreter exit"] = round(start + seconds - finished, 3)
    report["phases"] = phases
    # What a training job waits for is the step itself; the exit is counted apart.
    return {
        "to_first_step_s": round(finished - start, 3),
        "first_fwd_bwd_s": round(phases["forward"] + phases["backward"], 3),
        "seconds": round(seconds, 3),
        **report,
    }


def print_profile(path: str, top: int = 45) -> None:
    """Print the functions with the most cumulative time in a cProfile dump."""
    import pstats

    pstats.Stats(path).sort_stats("cumulative").print_stats(top)


PROG = "python -m slime_flashqla.bench.first_step"


class ChildFailed(RuntimeError):
    """The fresh process that measures the first step failed."""


def build_parser() -> argparse.ArgumentParser:
    """The parser, each option's help with its default."""
    from slime_flashqla.gdn.names import BACKENDS

    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="flashqla", help=f"GDN backend: {', '.join(BACKENDS)} (default flashqla)")
    parser.add_argument("--heads", default="16/32", help="Hk/Hv of the layer (default 16/32)")
    parser.add_argument(
        "--lengths", default="8192+24576", help="the packed batch, '+'-joined lengths or AxB (default 8192+24576)"
    )
    parser.add_argument("--profile", metavar="PATH", help="run the child under cProfile, dump to PATH, print the top")
    return parser


def check_arguments(args) -> str:
    """The batch as the child takes it ('+'-joined lengths); ValueError naming the first problem, before any work."""
    import torch

    from slime_flashqla.gdn import get_chunk_gated_delta_rule
    from slime_flashqla.workload.heads import parse_head_config
    from slime_flashqla.workload.lengths import ShapeError, parse_shape

    parse_head_config(args.heads)
    try:
        lengths = parse_shape(args.lengths).lengths
    except ShapeError as error:
        raise ValueError(f"--lengths: {error}") from None
    from slime_flashqla.gdn.names import BACKENDS

    if args.backend not in BACKENDS:
        raise ValueError(f"unknown GDN backend {args.backend!r}; valid names are: {', '.join(BACKENDS)}")
    if not torch.cuda.is_available():
        raise ValueError("needs a CUDA GPU: it times a GDN layer's first step (torch.cuda.is_available() is False)")
    get_chunk_gated_delta_rule(args.backend)  # a backend this node cannot run, said before the child starts
    return "+".join(map(str, lengths))


def main(argv=None) -> int:
    """Run the measurement and print it as JSON; bad input or no GPU is one line on stderr and exit 2."""
    from slime_flashqla.errors import one_line
    from slime_flashqla.gdn.errors import FlashQLAUnavailableError

    args = build_parser().parse_args(argv)
    try:
        lengths = check_arguments(args)
    except (ValueError, ImportError, FlashQLAUnavailableError) as error:
        print(f"{PROG}: {one_line(error)}", file=sys.stderr)
        return 2
    try:
        result = time_first_step(args.backend, args.heads, lengths, args.profile)
    except ChildFailed as error:
        print(f"{PROG}: {error}", file=sys.stderr)
        return 1
    if args.profile:
        print_profile(args.profile)
    print(json.dumps({"backend": args.backend, "heads": args.heads, "lengths": args.lengths, **result}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
