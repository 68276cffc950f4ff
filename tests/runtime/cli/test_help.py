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


def _exit_status(argv: list[str]) -> int:
    from slime_flashqla.cli import main

    try:
        return main(argv)
    except SystemExit as stopped:
        return stopped.code


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        ([], "slime-flashqla: error: choose a COMMAND: doctor, check, warmup, bench, cache"),
        (["cache"], "slime-flashqla cache: error: choose an ACTION: export, import, info"),
        (["bench"], "slime-flashqla bench: error: choose a BENCHMARK: comm, gdn, stream"),
    ],
)
def test_a_missing_subcommand_is_the_same_usage_error_everywhere(argv, words, capsys):
    """A missing subcommand is a usage error on stderr, exit 2, at every level (issue 35 item 15)."""
    assert _exit_status(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert lines[0].startswith("usage: ") and lines[-1] == f"{words} (see --help)", lines


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_help_exits_0_at_every_level(name, capsys):
    assert _exit_status([*name.split()[1:], "--help"]) == 0
    assert capsys.readouterr().out.startswith("usage: ")


def _option_helps(parsers=None):
    for name, parser in (PARSERS if parsers is None else dict(_parsers(parsers))).items():
        for action in parser._actions:
            if action.option_strings and action.help not in (None, argparse.SUPPRESS):
                yield name, action


@pytest.mark.parametrize("tilelang_set", [False, True])
def test_a_default_from_the_environment_shows_the_path_it_is_here(tilelang_set, tmp_path, monkeypatch):
    """A default an environment variable sets shows the path it is on this machine, set or unset (issue 35 item 16)."""
    for variable in ("TILELANG_CACHE_DIR", "TRITON_CACHE_DIR", "TRITON_HOME"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    if tilelang_set:
        monkeypatch.setenv("TILELANG_CACHE_DIR", str(tmp_path / "tl"))
    tilelang = str(tmp_path / "tl") if tilelang_set else f"{tmp_path}/.tilelang/cache"
    helps = [(name, action.help) for name, action in _option_helps(build_parser())]
    named = {"TILELANG": [h for _, h in helps if "$TILELANG_CACHE_DIR" in h],
             "TRITON": [h for _, h in helps if "$TRITON_CACHE_DIR" in h]}  # fmt: skip
    assert len(named["TILELANG"]) >= 3 and len(named["TRITON"]) >= 2, helps
    assert all(tilelang in h for h in named["TILELANG"]), named["TILELANG"]
    assert all(f"{tmp_path}/.triton/cache" in h for h in named["TRITON"]), named["TRITON"]
    assert all(("unset here" in h) != tilelang_set for h in named["TILELANG"])


def test_every_model_option_lists_the_names_it_takes():
    """Every --model option's help lists the model names it takes (issue 35 item 16)."""
    from slime_flashqla.workload.models import MODEL_HEADS

    models = [(name, action.help) for name, action in _option_helps() if "--model" in action.option_strings]
    assert {name for name, _ in models} >= {"slime-flashqla warmup", "slime-flashqla bench stream"}
    for name, text in models:
        assert all(model in text for model in MODEL_HEADS), (name, text)
