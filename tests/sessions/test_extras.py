"""The runtime's extras: what `--plot` needs is an extra of its own, and the CPU suite installs it."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]


def test_plot_is_an_extra_with_matplotlib():
    extras = tomllib.loads((ROOT / "runtime" / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert [Requirement(r).name for r in extras["plot"]] == ["matplotlib"]


def test_the_tests_session_installs_the_plot_extra():
    """Without it the PNG tests skip and a broken --plot passes CI (issue 24 item 2)."""
    tree = ast.parse((ROOT / "noxfile.py").read_text())
    (tests,) = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "tests"]
    calls = [
        node
        for node in ast.walk(tests)
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "install_runtime"
    ]
    assert calls and {"cli", "plot"} <= {arg.value for arg in calls[0].args if isinstance(arg, ast.Constant)}
