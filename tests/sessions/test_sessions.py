"""noxfile.py's sessions on this very machine: what they do where a GPU, an engine or a base image is missing."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
NOX = shutil.which("nox", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
# A registry no machine serves: a pull fails at once, whatever the network.
UNPULLABLE_BASE = "localhost:1/slime-flashqla-test/absent-base:none"

pytestmark = pytest.mark.skipif(NOX is None, reason="nox is not on PATH")


def nox(*sessions: str, path: str | None = None, **env: str) -> subprocess.CompletedProcess:
    """Run nox sessions of this checkout with the SLIME_FLASHQLA_* knobs given here and no others."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SLIME_FLASHQLA_")}
    # `python` in the python=False sessions is this test's interpreter.
    clean["PATH"] = path if path is not None else f"{Path(sys.executable).parent}{os.pathsep}{clean['PATH']}"
    return subprocess.run(
        [NOX, "-f", str(ROOT / "noxfile.py"), "-s", *sessions],
        capture_output=True, text=True, timeout=600, env={**clean, **env}, cwd=ROOT,
    )  # fmt: skip


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible")
def test_gpu_tests_fail_where_no_gpu_is_visible():
    done = nox("gpu_tests")
    assert done.returncode == 1, done.stderr
    assert "no GPU is visible" in done.stderr
    assert "SLIME_FLASHQLA_ALLOW_NO_GPU=1" in done.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible")
def test_gpu_tests_skip_where_no_gpu_is_allowed():
    done = nox("gpu_tests", SLIME_FLASHQLA_ALLOW_NO_GPU="1")
    assert done.returncode == 0, done.stderr
    assert "gpu_tests skipped: no GPU is visible" in done.stderr


def test_image_sessions_skip_without_an_engine(tmp_path):
    # A PATH with git and the interpreter but neither podman nor docker.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool, found in (("git", shutil.which("git")), ("python", sys.executable), ("python3", sys.executable)):
        if found:
            (bin_dir / tool).symlink_to(found)
    done = nox("image_build(default)", "image_tests(default)", path=str(bin_dir))
    assert done.returncode == 0, done.stderr
    assert "image_build(default) skipped: neither podman nor docker is on PATH" in done.stderr
    assert "image_tests(default) skipped" in done.stderr
    required = nox("image_build(default)", path=str(bin_dir), SLIME_FLASHQLA_REQUIRE_IMAGES="1")
    assert required.returncode == 1
    assert "SLIME_FLASHQLA_REQUIRE_IMAGES=1 requires the image sessions to run" in required.stderr


@pytest.mark.skipif(shutil.which("podman") is None, reason="podman is not installed")
def test_image_sessions_skip_where_the_base_image_cannot_be_pulled():
    done = nox("image_build(default)", "image_tests(default)", SLIME_FLASHQLA_BASE_IMAGE_DEFAULT=UNPULLABLE_BASE)
    assert done.returncode == 0, done.stderr
    assert f"image_build(default) skipped: base image {UNPULLABLE_BASE} is not here and cannot be pulled" in done.stderr
    # The image that an earlier run may have left under the tag is not tested in its place.
    assert "image_tests(default) skipped: image_build(default) built no image in this run" in done.stderr
    required = nox(
        "image_build(default)", SLIME_FLASHQLA_BASE_IMAGE_DEFAULT=UNPULLABLE_BASE, SLIME_FLASHQLA_REQUIRE_IMAGES="1"
    )
    assert required.returncode == 1
    assert "cannot be pulled" in required.stderr


def test_gpu_tests_from_an_environment_without_torch_says_where_nox_must_live(tmp_path):
    """The README's test command in a venv of its own: gpu_tests needs nox beside the stack, and says so."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True, timeout=120)
    bare_bin = tmp_path / "bare" / "bin"
    done = nox("gpu_tests", path=f"{bare_bin}{os.pathsep}{os.environ['PATH']}")
    assert done.returncode == 1, done.stderr
    assert f"its python ({bare_bin / 'python'}) has no torch" in done.stderr
    assert "python -m pip install -r env/nox.txt" in done.stderr and "No module named pip" not in done.stderr


def test_the_session_names_that_readme_docs_and_ci_call_stay():
    """The image sessions come from docker/images/ folders now; their names must not move with them."""
    done = subprocess.run([NOX, "-f", str(ROOT / "noxfile.py"), "-l"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    names = re.findall(r"^[*-] (\S+) ->", done.stdout, re.MULTILINE)
    images = [
        f"{session}({name})"
        for session in ("image_build", "image_tests")
        for name in ("default", "gb10", "gb10-flashqla")
    ]
    assert names == ["tests", "gpu_tests", "lint", "conda_build", "conda_check", *images, "hadolint"]
