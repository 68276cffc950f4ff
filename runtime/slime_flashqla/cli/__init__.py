"""The `slime-flashqla` command line: one module per subcommand.

Errors: a subcommand, and the benchmarks under `bench`, raise `slime_flashqla.errors.UserError`
(or let the runtime's FlashQLAUnavailableError, ImportError, ValueError or OSError through)
instead of printing their own; `main` prints one line,
`slime-flashqla COMMAND: message`, and exits 2.  Anything else is one line too, exit 1.
`--debug` (before or after the subcommand) shows the traceback instead.  Ctrl-C exits 130 and
SIGTERM 143, each after the same cleanup (files/termination.py); a reader that closes stdout
early (`| head`) ends the command quietly with 141, as SIGPIPE ends other tools.

Help: a (sub-)subcommand's one-line help is also its `--help` description, and an option's help
that does not state its default gets `(default X)` appended (`complete_help`), so no subcommand
module has to repeat either.
"""

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
    parser.add_argument("--debug", action="store_true", help="on an error, show the traceback")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    _add_debug_flag(parser)
    complete_help(parser)
    return parser


def complete_help(parser: argparse.ArgumentParser) -> None:
    """Give every subcommand its help line as description, and every option's help its default."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            for name, sub in action.choices.items():
                if sub.description is None and helps.get(name):
                    sub.description = helps[name]
                complete_help(sub)
        elif action.option_strings and action.help not in (None, argparse.SUPPRESS) and "default" not in action.help:
            default = action.default
            if default is None or isinstance(default, bool) or default in ("", [], argparse.SUPPRESS):
                continue  # a flag, or an option whose absence means "not asked for"
            shown = " ".join(map(str, default)) if isinstance(default, list | tuple) else default
            action.help = f"{action.help} (default {shown})"


def _add_debug_flag(parser: argparse.ArgumentParser) -> None:
    """Give every (sub-)subcommand `--debug` too, so it works after the subcommand's name."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                # SUPPRESS: an absent sub-level flag leaves the top-level value alone.
                sub.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
                _add_debug_flag(sub)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit code; errors become one line unless --debug."""
    from slime_flashqla.cli.errors import user_error_types
    from slime_flashqla.errors import one_line
    from slime_flashqla.files.termination import TERMINATED_EXIT, Terminated, sigterm_raises

    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 2
    words = ("slime-flashqla", args.command, getattr(args, "benchmark", None), getattr(args, "cache_action", None))
    prefix = " ".join(filter(None, words))
    try:
        with sigterm_raises():  # `docker stop`: clean up as for Ctrl-C, then exit 143
            code = int(args.func(args) or 0)
            sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
        return code
    except BrokenPipeError:
        return _stdout_closed()
    except Terminated:
        print(f"{prefix}: terminated (SIGTERM)", file=sys.stderr)
        return TERMINATED_EXIT
    except KeyboardInterrupt:
        print(f"{prefix}: interrupted", file=sys.stderr)
        return 130
    except Exception as error:
        if args.debug:
            raise
        if isinstance(error, user_error_types()):
            print(f"{prefix}: {one_line(error)}", file=sys.stderr)
            return 2
        unexpected = f"unexpected {type(error).__name__}: {one_line(error)}"
        print(f"{prefix}: {unexpected} (run again with --debug for the traceback)", file=sys.stderr)
        return 1


def _stdout_closed() -> int:
    """The reader of stdout went away (`| head`): stop quietly, as a tool killed by SIGPIPE does."""
    import os
    import signal

    # Whatever is still buffered would raise again when Python flushes stdout at exit.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 128 + signal.SIGPIPE


if __name__ == "__main__":
    sys.exit(main())
