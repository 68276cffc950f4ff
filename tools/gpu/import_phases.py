"""Warm-start imports of the `auto` path on a GPU node, in fresh processes: the deferral now against before.

`python3 tools/gpu/import_phases.py --runs 3 --json import_phases.json` alternates two variants,
each run a new Python process with bytecode already cached (one unmeasured run of each first):

- `deferred`: what `auto` imports today: `flash_qla` with its module-level `@torch.compile`
  and `@torch.compiler.disable` both deferred (slime_flashqla.gdn.backends.flashqla.deferred_compile);
- `compile-only`: the same with only `@torch.compile` deferred (this package at cb402ae),
  so `@torch.compiler.disable` builds its marker, and TorchDynamo with sympy, at import.

Each run reports its phases (torch, this package, each kernel package, CUDA init), which
compilers ended up imported, and its `-X importtime` seconds by package. The parent prints
the median of every phase per variant and the ratio of their totals. No kernel is launched:
nothing here needs a warm kernel cache.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

from slime_flashqla.bench.first_step import imports_by_package

CHILD = """
import json, sys, time
started = time.time()
t0 = time.perf_counter()
phases = {}


def mark(name):
    global t0
    now = time.perf_counter()
    phases[name] = round(now - t0, 3)
    t0 = now


import torch
mark('torch')
import slime_flashqla.gdn.backends.flashqla.deferred_compile as deferred
if sys.argv[1] == 'compile-only':
    deferred._deferred_disable = lambda real: real  # cb402ae: only torch.compile was deferred
from slime_flashqla.kernels.imports import import_kernel_packages
from slime_flashqla.layers import Qwen3NextGatedDeltaNet
mark('slime_flashqla')
kernel_imports = import_kernel_packages('auto')
mark('kernel packages')
if torch.cuda.is_available():  # a CPU machine runs the script as a smoke test
    torch.ones(1, device='cuda').add_(1)
    torch.cuda.synchronize()
mark('cuda init')
loaded = {name: name in sys.modules for name in ('torch._dynamo', 'torch._inductor', 'sympy', 'fla', 'flash_qla')}
print('IMPORTS ' + json.dumps({'phases': phases, 'kernel_imports': kernel_imports, 'loaded': loaded,
                               'started': started}), flush=True)
"""


def run_once(variant: str) -> dict:
    """One fresh process of `variant`: its phases, what it loaded, and its import seconds by package."""
    start = time.time()
    child = subprocess.run([sys.executable, "-X", "importtime", "-c", CHILD, variant], capture_output=True, text=True)
    total = time.time() - start
    if child.returncode != 0:
        sys.exit(f"{variant}: the child failed:\n{child.stderr[-3000:]}")
    line = next(line for line in child.stdout.splitlines() if line.startswith("IMPORTS "))
    report = json.loads(line.removeprefix("IMPORTS "))
    report["phases"] = {"interpreter start": round(report.pop("started") - start, 3), **report["phases"]}
    report["process_s"] = round(total, 3)
    report["imports_by_package"] = imports_by_package(child.stderr.splitlines())
    return report


def main() -> None:
    """Alternate the variants `--runs` times each and print (and optionally save) the medians."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", help="write every run and the medians here")
    args = parser.parse_args()
    variants = ("deferred", "compile-only")
    for variant in variants:  # bytecode compiled and files in the page cache before anything is timed
        run_once(variant)
    runs = {variant: [] for variant in variants}
    for _ in range(args.runs):
        for variant in variants:
            runs[variant].append(run_once(variant))
    medians = {}
    for variant, reports in runs.items():
        phases = {name: statistics.median(r["phases"][name] for r in reports) for name in reports[0]["phases"]}
        medians[variant] = {"phases": phases, "process_s": statistics.median(r["process_s"] for r in reports)}
        print(f"{variant}: loaded {reports[0]['loaded']}")
        print(f"  median phases s: {phases}; whole process {medians[variant]['process_s']} s")
        print(f"  imports by package (first run): {reports[0]['imports_by_package']}")
    ratio = medians["deferred"]["process_s"] / medians["compile-only"]["process_s"]
    print(f"deferred / compile-only, whole process: {ratio:.3f}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"runs": runs, "medians": medians, "ratio": ratio}, handle, indent=2)


if __name__ == "__main__":
    main()
