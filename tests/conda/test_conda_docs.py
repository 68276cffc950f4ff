"""What a conda user reads first says which route trains on Hopper, with the pinned versions (issue 24 item 12)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _intro(language: str) -> str:
    """docs/<language>/conda.md up to its first section: what a reader sees before anything else."""
    text = (ROOT / "docs" / language / "conda.md").read_text()
    return text.split("\n## ", 1)[0]


@pytest.mark.parametrize("language", ["en", "zh"])
def test_the_top_of_the_conda_guide_names_the_training_route_and_the_solver_override(language, pins):
    intro = _intro(language)
    assert "0.5.x" in intro and "`fla`" in intro and "Hopper" in intro  # the package's FLA is refused there
    assert "--qwen-gdn-backend flashqla" in intro  # ... so it trains through FlashQLA
    assert "nox -s conda_build" in intro and "build/conda" in intro  # no channel: build it first
    assert "__cuda" in intro and f"CONDA_OVERRIDE_CUDA={pins['torch']['cuda']}" in intro
    assert "--dry-run" in intro


@pytest.mark.parametrize("language", ["en", "zh"])
def test_the_package_route_adds_flashqla_at_the_pinned_versions(language, pins):
    text = (ROOT / "docs" / language / "conda.md").read_text()
    fence = re.search(r"```bash\n(# .*\n)?conda install -c \"\$PWD/build/conda\".*?```", text, re.S)
    assert fence, "no `conda install` of the built package"
    block = fence.group(0)
    wanted = f"flash-qla=={pins['packages']['flash-qla']} tilelang=={pins['packages']['tilelang']}"
    assert wanted in block and "doctor --require flashqla" in block


def test_the_readme_conda_row_says_it_too():
    readme = (ROOT / "README.md").read_text().splitlines()
    (row,) = [line for line in readme if line.startswith("| conda |") and "create_env.sh" in line]
    assert "0.5.x" in row and "flashqla" in row


def test_the_recipe_description_says_it_too():
    description = (ROOT / "conda-recipe" / "meta.yaml").read_text().split("description: |", 1)[1]
    assert "0.5.x" in description and "--qwen-gdn-backend flashqla" in description


@pytest.mark.parametrize(("opt_out", "backend"), [((), "flashqla"), (("--no-flashqla",), "fla")])
def test_create_env_ends_by_naming_the_backend_its_environment_trains_with(tmp_path, opt_out, backend):
    script = ROOT / "env" / "conda" / "create_env.sh"
    done = subprocess.run(
        ["bash", str(script), "--prefix", str(tmp_path / "env"), "--tool", "conda", "--dry-run", *opt_out],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip().endswith(f"train with --qwen-gdn-backend {backend}")
