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
module has to repeat either; a default that an environment variable sets, `(default: $VAR)`,
gets the path it is on this machine, and every `--model` the model names it takes.
`--help` exits 0 everywhere; a command whose subcommand is missing (`slime-flashqla`,
`slime-flashqla cache`, `slime-flashqla bench`) is a usage error naming the choices, exit 2.
"""

from __future__ import annotations

import argparse
import importlib
import re
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
    _subcommand_chosen_in_main(parser)
    complete_help(parser)
    return parser


def _subcommand_chosen_in_main(parser: argparse.ArgumentParser) -> None:
    """A missing subcommand reaches `main` (which names the choices) at every level, whatever the module set."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            action.required = False
            parser.set_defaults(func=None)  # `cache` alone printed its help (exit 2) where `bench` alone erred
            for sub in action.choices.values():
                _subcommand_chosen_in_main(sub)


def _missing_subcommand(parser: argparse.ArgumentParser, args: argparse.Namespace):
    """(parser, its subparsers action) of the level whose subcommand `args` lacks, or None."""
    while True:
        action = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        if action is None:
            return None
        chosen = getattr(args, action.dest, None)
        if chosen is None:
            return parser, action
        parser = action.choices[chosen]


def _env_default(match: re.Match) -> str:
    """`(default: $VAR)` with the path the default is on this machine, the variable set or not."""
    import os

    from slime_flashqla.kernels.cache import tilelang_cache_dir, triton_cache_dir

    variable = match.group(1)
    where = {"TILELANG_CACHE_DIR": tilelang_cache_dir, "TRITON_CACHE_DIR": triton_cache_dir}.get(variable)
    if where is None:
        return match.group(0)
    path = str(where()).replace("%", "%%")  # argparse formats help with %
    state = "here" if os.environ.get(variable) else "unset here, so"
    return f"(default: ${variable}; {state} {path})"


def complete_help(parser: argparse.ArgumentParser) -> None:
    """Give every subcommand its help line as description, and every option's help its default."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            for name, sub in action.choices.items():
                if sub.description is None and helps.get(name):
                    sub.description = helps[name]
                complete_help(sub)
        elif action.option_strings and action.help not in (None, argparse.SUPPRESS):
            _complete_option_help(action)


def _complete_option_help(action: argparse.Action) -> None:
    """An option's help with its default, the path an environment default is here, and --model's names."""
    from slime_flashqla.workload.models import MODEL_HEADS

    action.help = re.sub(r"\(default: \$([A-Z_]+)\)", _env_default, action.help)
    if "--model" in action.option_strings and not all(name in action.help for name in MODEL_HEADS):
        action.help = f"{action.help}; names: {', '.join(MODEL_HEADS)}"
    if "default" not in action.help:
        default = action.default
        if default is None or isinstance(default, bool) or default in ("", [], argparse.SUPPRESS):
            return  # a flag, or an option whose absence means "not asked for"
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
    missing = _missing_subcommand(parser, args)
    if missing is not None:
        level, action = missing
        article = "an" if action.metavar[0] in "AEIOU" else "a"
        level.error(f"choose {article} {action.metavar}: {', '.join(action.choices)} (see --help)")
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
