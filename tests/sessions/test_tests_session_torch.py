"""The torch `nox -s tests` installs: SLIME_FLASHQLA_TORCH where it is set (CI), else a CPU build (issue 35 item 4).

The CPU suite needs no CUDA: from PyPI alone its venv would get torch's CUDA wheels (4 GB). The session
is run with a stand-in for the `nox` module (nox itself is not under test, and is not installed in the
suite's own venv) and a session that records what it is asked to install.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def nox_stand_in() -> types.ModuleType:
    """What noxfile.py uses of nox at import: options, the decorators, Session, PassthroughEnv."""
    nox = types.ModuleType("nox")
    nox.options = types.SimpleNamespace(sessions=[])
    nox.session = lambda *args, **kwargs: args[0] if args and callable(args[0]) else (lambda function: function)
    nox.parametrize = lambda *args, **kwargs: lambda function: function
    nox.Session = object
    nox.virtualenv = types.SimpleNamespace(PassthroughEnv=type("PassthroughEnv", (), {}))
    return nox


@pytest.fixture
def noxfile(monkeypatch):
    monkeypatch.setitem(sys.modules, "nox", nox_stand_in())
    spec = importlib.util.spec_from_file_location("slime_flashqla_noxfile", ROOT / "noxfile.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class RecordingSession:
    """A session venv that records the pip installs it is asked for."""

    virtualenv = object()

    def __init__(self):
        self.installs: list[tuple[str, ...]] = []

    def install(self, *args: str) -> None:
        self.installs.append(args)


def torch_install(noxfile, monkeypatch, value: str | None) -> tuple[str, ...]:
    if value is None:
        monkeypatch.delenv("SLIME_FLASHQLA_TORCH", raising=False)
    else:
        monkeypatch.setenv("SLIME_FLASHQLA_TORCH", value)
    session = RecordingSession()
    noxfile.install_runtime(session, "cli", "plot")
    return session.installs[0]


def test_without_the_variable_the_session_installs_a_cpu_torch(noxfile, monkeypatch):
    """pip takes the CPU index's `+cpu` build over PyPI's of the same version (PEP 440 orders it later)."""
    first = torch_install(noxfile, monkeypatch, None)
    assert first[-1] == "torch"
    assert first[first.index("--extra-index-url") + 1] == CPU_INDEX


def test_the_variable_names_the_torch_as_it_is(noxfile, monkeypatch):
    assert torch_install(noxfile, monkeypatch, "torch==2.13.0") == ("torch==2.13.0",)


def test_the_readme_test_section_names_the_variable_and_the_cpu_build():
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("Run the tests") : readme.index("ci:test-command:begin")]
    assert "SLIME_FLASHQLA_TORCH" in section and "CPU" in section
