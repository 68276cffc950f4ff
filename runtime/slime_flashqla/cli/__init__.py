"""The `slime-flashqla` command line: one module per subcommand."""

from __future__ import annotations

import argparse
import importlib
import sys

# Each entry is a module with `register(subparsers)`; registering sets
# `func` on its parser.  Modules are imported here, but each one imports torch
# and the kernels only inside its command function.
SUBCOMMAND_MODULES = (
    "slime_flashqla.cli.doctor",
    "slime_flashqla.cli.check",
    "slime_flashqla.cli.warmup",
    "slime_flashqla.cli.bench",
    "slime_flashqla.cli.cache",
)


def build_parser() -> argparse.ArgumentParser:
    """Build the top-level parser with every registered subcommand."""
    from slime_flashqla import __version__

    parser = argparse.ArgumentParser(
        prog="slime-flashqla",
        description="FlashQLA / FLA kernels for Qwen Gated DeltaNet: check, benchmark, warm up, move kernel caches.",
    )
    parser.add_argument("--version", action="version", version=f"slime-flashqla {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
