"""`slime-flashqla bench NAME ...`: run one of the package's benchmarks."""

from __future__ import annotations

import argparse
import importlib

# name -> (module, one-line help).  Each module has `add_arguments(parser)` and
# `run(args) -> int`, and imports torch only inside `run`; a new benchmark is one line here.
BENCHMARKS = {
    "comm": ("slime_flashqla.bench.comm", "torch.distributed latency unwrapped vs each comm-guard policy"),
    "gdn": ("slime_flashqla.bench.gdn", "GDN kernel and layer latency per backend, with and without GVA"),
    "stream": (
        "slime_flashqla.bench.stream",
        "an RL-like stream of training steps per variant: first step, stalls, compiles after step 0",
    ),
}


def register(subparsers) -> None:
    """Add `bench` and one sub-subcommand per entry of BENCHMARKS."""
    parser = subparsers.add_parser("bench", help="run a benchmark (" + ", ".join(BENCHMARKS) + ")")
    benchmarks = parser.add_subparsers(dest="benchmark", metavar="BENCHMARK", required=True)
    for name, (module_name, help_text) in BENCHMARKS.items():
        sub = benchmarks.add_parser(name, help=help_text, description=help_text)
        module = importlib.import_module(module_name)
        module.add_arguments(sub)
        sub.set_defaults(func=_runner(module_name))


def _runner(module_name: str):
    """Return the `func` that runs one benchmark module with the parsed arguments."""

    def run(args: argparse.Namespace) -> int:
        return importlib.import_module(module_name).run(args)

    return run
