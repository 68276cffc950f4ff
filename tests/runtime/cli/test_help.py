"""`slime-flashqla ... --help`: every subcommand says what it does, and every option with a default says which."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from slime_flashqla.cli import build_parser


def _parsers(parser: argparse.ArgumentParser, name: str = "slime-flashqla"):
    """(command name, parser) of the top level and of every (sub-)subcommand."""
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from _parsers(sub, f"{name} {sub_name}")


PARSERS = dict(_parsers(build_parser()))


def _meaningful(default) -> bool:
    # `is` for the flags' booleans: 1 == True and 0 == False, and --jobs 1 is a default to state.
    return not (default is None or isinstance(default, bool) or default in ("", [], argparse.SUPPRESS))


def test_every_subcommand_is_listed():
    assert {"slime-flashqla doctor", "slime-flashqla check", "slime-flashqla warmup", "slime-flashqla bench gdn",
            "slime-flashqla bench stream", "slime-flashqla bench comm", "slime-flashqla cache export",
            "slime-flashqla cache import", "slime-flashqla cache info"} <= set(PARSERS)  # fmt: skip


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_every_command_has_a_description(name):
    assert PARSERS[name].description, f"`{name} --help` has no description line"


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_every_option_with_a_default_states_it(name):
    help_text = PARSERS[name].format_help()
    for action in PARSERS[name]._actions:
        if action.help in (None, argparse.SUPPRESS) or not action.option_strings or not _meaningful(action.default):
            continue
        assert "default" in action.help, f"{name} {action.option_strings[0]}: help {action.help!r} states no default"
        assert action.help.split("(")[0].strip()[:20] in " ".join(help_text.split())


def test_the_installed_command_prints_a_description_for_doctor_check_and_warmup():
    for command in ("doctor", "check", "warmup"):
        done = subprocess.run(
            [sys.executable, "-m", "slime_flashqla", command, "--help"], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0
        _, _, rest = done.stdout.partition("\n\n")
        description = rest.split("\n\n")[0]
        assert description and not description.startswith("options:"), done.stdout
