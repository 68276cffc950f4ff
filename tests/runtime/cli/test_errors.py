"""The CLI's error contract: one line on stderr and a non-zero exit; the traceback only with --debug."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest
import torch

import slime_flashqla.cli as cli_module
from slime_flashqla.errors import UserError

NO_GPU = not torch.cuda.is_available()


def cli(*args):
    return subprocess.run([sys.executable, "-m", "slime_flashqla", *args], capture_output=True, text=True, timeout=300)


@pytest.mark.skipif(not NO_GPU, reason="describes a machine without a GPU")
@pytest.mark.parametrize("backend", ["flashqla", "fla"])
def test_check_with_a_backend_this_machine_cannot_run_is_one_line(backend):
    done = cli("check", "--backend", backend)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    # Only the CLI's own line counts: native libraries may print to stderr on their own
    # (torch's oneDNN under qemu-aarch64: "Can't open MIDR_EL1 sysfs entry").
    ours = [line for line in lines if line.startswith("slime-flashqla")]
    assert ours == [lines[-1]], done.stderr
    assert ours[0].startswith("slime-flashqla check: ")
    assert "pip install" in ours[0] or "CUDA" in ours[0]


@pytest.mark.skipif(not NO_GPU, reason="describes a machine without a GPU")
@pytest.mark.parametrize("where", ["before", "after"])
def test_debug_shows_the_traceback(where):
    args = (
        ["--debug", "check", "--backend", "flashqla"]
        if where == "before"
        else ["check", "--backend", "flashqla", "--debug"]
    )
    done = cli(*args)
    assert done.returncode != 0
    assert "Traceback (most recent call last)" in done.stderr


def _fake_subcommand(error: BaseException) -> types.ModuleType:
    """A subcommand module, registered through the real parser, whose command raises `error`."""
    module = types.ModuleType("slime_flashqla_test_subcommand")

    def register(subparsers):
        sub = subparsers.add_parser("boom")
        sub.add_argument("--flag", action="store_true")

        def run(args):
            raise error

        sub.set_defaults(func=run)

    module.register = register
    return module


@pytest.fixture
def subcommand(monkeypatch):
    def install(error):
        module = _fake_subcommand(error)
        monkeypatch.setitem(sys.modules, module.__name__, module)
        monkeypatch.setattr(cli_module, "SUBCOMMAND_MODULES", (*cli_module.SUBCOMMAND_MODULES, module.__name__))

    return install


def test_user_error_is_its_message_and_exit_2(subcommand, capsys):
    subcommand(UserError("--flag needs a value\nsecond line"))
    assert cli_module.main(["boom"]) == 2
    err = capsys.readouterr().err
    assert err == "slime-flashqla boom: --flag needs a value second line\n"


def test_unexpected_error_is_one_line_and_exit_1(subcommand, capsys):
    subcommand(RuntimeError("CUDA error: an illegal memory access"))
    assert cli_module.main(["boom"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "unexpected RuntimeError: CUDA error: an illegal memory access" in err
    assert "--debug" in err


def test_debug_reraises_for_the_traceback(subcommand):
    subcommand(UserError("bad"))
    with pytest.raises(UserError):
        cli_module.main(["boom", "--debug"])
    with pytest.raises(UserError):
        cli_module.main(["--debug", "boom"])
