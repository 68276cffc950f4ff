"""Building runtime/ from source: an old Python is refused in one line before pip downloads anything,
and the build uses no setuptools form that is deprecated with a deadline."""

from __future__ import annotations

import functools
import glob
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "runtime" / "pyproject.toml").read_text())
# pip with no configuration of this machine's (indexes, constraints, find-links) and no index at all:
# whatever it would download first is refused, so a check that runs too late shows as "no matching distribution".
OFFLINE_PIP = ["-m", "pip", "--isolated", "--disable-pip-version-check", "install", "--dry-run", "--no-index"]


@functools.cache
def python_310() -> str | None:
    """A CPython 3.10 interpreter that runs on this machine (PATH, then pyenv's versions), or None."""
    candidates = [
        shutil.which("python3.10"),
        *sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.10*/bin/python3.10"))),
    ]
    for candidate in filter(None, candidates):
        # A pyenv shim is on PATH whether or not it can start 3.10 from here.
        probe = subprocess.run(
            [candidate, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True
        )
        if probe.stdout.strip() == "(3, 10)":
            return candidate
    return None


def test_requires_python_is_a_floor_the_build_can_read():
    """setup.py reads the floor from requires-python, which must stay of the form '>=X.Y'."""
    assert re.fullmatch(r">=3\.\d+", PYPROJECT["project"]["requires-python"])


@pytest.mark.skipif(python_310() is None, reason="no python3.10 here (PATH or ~/.pyenv/versions/3.10*)")
def test_the_main_command_on_python_310_says_which_python_it_needs_before_any_download(tmp_path):
    """The README's main command on Ubuntu 22.04's python3 (issue 35 item 5), offline: the refusal comes first."""
    done = subprocess.run(
        [python_310(), *OFFLINE_PIP, "--no-build-isolation", "./runtime[cli,flashqla]", "-c", "env/stack.txt"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env={**os.environ, "PIP_NO_CACHE_DIR": "1"},
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode != 0
    assert re.search(r"slime-flashqla needs Python >= 3\.11 \(this is 3\.10\.\d+\)", output), output[-3000:]
    assert "matching distribution" not in output and "Traceback" not in output


def test_the_build_requirement_is_bounded_and_the_license_is_an_spdx_expression():
    """setuptools deprecates the license table with a deadline (2027-02-18); an unbounded build requirement
    would take the first setuptools that drops it (issue 35 item 23)."""
    (setuptools,) = [Requirement(r) for r in PYPROJECT["build-system"]["requires"] if r.startswith("setuptools")]
    assert any(spec.operator == "<" for spec in setuptools.specifier), setuptools
    assert isinstance(PYPROJECT["project"]["license"], str)
    assert (ROOT / "runtime" / PYPROJECT["project"]["license-files"][0]).is_file()


def _setuptools_fits() -> bool:
    (setuptools,) = [Requirement(r) for r in PYPROJECT["build-system"]["requires"] if r.startswith("setuptools")]
    try:
        return setuptools.specifier.contains(importlib.metadata.version("setuptools"))
    except importlib.metadata.PackageNotFoundError:
        return False


@pytest.mark.skipif(not _setuptools_fits(), reason="this environment's setuptools is not the build requirement's")
def test_the_wheel_builds_without_a_setuptools_deprecation(tmp_path):
    # A copy: pip builds in the source tree, which may be read-only (an image) and is not the test's to fill.
    source = shutil.copytree(
        ROOT / "runtime", tmp_path / "runtime", ignore=shutil.ignore_patterns("build", "*.egg-info")
    )
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--isolated", "wheel", "--no-deps", "--no-build-isolation", "-v",
         "-w", str(tmp_path / "wheels"), str(source)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert list((tmp_path / "wheels").glob("slime_flashqla-*.whl"))
    assert "Deprecat" not in done.stdout + done.stderr
