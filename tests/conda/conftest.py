"""Shared paths and parsed pins for the static conda checks (`nox -s conda_check`)."""

from __future__ import annotations

import importlib.util
import os
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RECIPE_DIR = ROOT / "conda-recipe"
CONDA_ENV_DIR = ROOT / "env" / "conda"

# `nox -s conda_check` sets this: there a missing checker is an error, not a skip,
# so CI cannot pass by skipping what it was meant to check.
STRICT = os.environ.get("SLIME_FLASHQLA_CONDA_CHECK") == "1"
NEEDED = ("yaml", "jinja2")
missing = [name for name in NEEDED if importlib.util.find_spec(name) is None]
if missing and STRICT:
    raise pytest.UsageError(
        f"conda checks need {', '.join(missing)}: install env/conda/check-tools.txt (nox -s conda_check does)"
    )


def _require_checkers() -> None:
    """Skip where the parsers are absent (the plain `tests` session); conda_check has them."""
    if missing:
        pytest.skip(f"needs {', '.join(missing)}; these checks run in `nox -s conda_check`")


@pytest.fixture(scope="session")
def renderer():
    """The static meta.yaml renderer (conda_recipe_render)."""
    _require_checkers()
    import conda_recipe_render

    return conda_recipe_render


@pytest.fixture(scope="session")
def recipe(renderer) -> dict:
    """conda-recipe/meta.yaml, rendered and parsed."""
    return renderer.render(RECIPE_DIR)


@pytest.fixture(scope="session")
def load_yaml():
    """yaml.safe_load, or a skip where PyYAML is absent."""
    _require_checkers()
    import yaml

    return yaml.safe_load


@pytest.fixture(scope="session")
def pins() -> dict:
    """env/versions.toml, the one source of version pins."""
    return tomllib.loads((ROOT / "env" / "versions.toml").read_text())


@pytest.fixture(scope="session")
def pyproject() -> dict:
    """The runtime's pyproject.toml."""
    return tomllib.loads((ROOT / "runtime" / "pyproject.toml").read_text())
