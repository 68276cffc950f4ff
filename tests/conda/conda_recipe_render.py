"""Render conda-recipe/meta.yaml as conda-build does, for exactly the context it uses.

conda-build is not on PyPI, so CI cannot run its renderer.  This one gives the Jinja
template the few names the recipe uses, implemented as conda-build implements them
(`load_file_data`, the variant values from conda_build_config.yaml, `PYTHON`), and
fails on anything else: a name it does not know is an error (StrictUndefined), and so
is a line selector (`# [linux]`), which it does not evaluate.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import jinja2
import yaml

SELECTOR = re.compile(r"#\s*\[[^\]]*\]\s*$")
PARSERS = {
    "toml": tomllib.loads,
    "json": json.loads,
    "yaml": yaml.safe_load,
    "yml": yaml.safe_load,
}


def make_load_file_data(recipe_dir: Path):
    """conda-build's load_file_data, limited to files named relative to the recipe."""

    def load_file_data(filename: str, fmt: str | None = None, *, from_recipe_dir: bool = False) -> Any:
        if not from_recipe_dir:
            # conda-build would read from the unpacked source, which a static render lacks.
            raise ValueError(f"load_file_data({filename!r}) needs from_recipe_dir=True in a static render")
        path = recipe_dir / filename
        if not path.is_file():
            raise FileNotFoundError(f"No such file: {filename!r} (from {recipe_dir})")
        kind = (fmt or path.suffix.lstrip(".")).lower()
        if kind not in PARSERS:
            raise ValueError(f"Unknown file format: {kind}. Allowed formats: {sorted(PARSERS)}")
        return PARSERS[kind](path.read_text())

    return load_file_data


def variant(recipe_dir: Path) -> dict[str, Any]:
    """The single variant conda_build_config.yaml defines (each key must have one value)."""
    path = recipe_dir / "conda_build_config.yaml"
    if not path.exists():
        return {}
    config = yaml.safe_load(path.read_text()) or {}
    chosen = {}
    for key, values in config.items():
        if not isinstance(values, list) or len(values) != 1:
            raise ValueError(f"{path}: {key} must list exactly one value for a static render")
        chosen[key] = values[0]
    return chosen


def render_text(recipe_dir: Path) -> str:
    """The recipe's meta.yaml after Jinja, as text."""
    source = (recipe_dir / "meta.yaml").read_text()
    for number, line in enumerate(source.splitlines(), 1):
        if SELECTOR.search(line):
            raise ValueError(f"meta.yaml:{number}: line selectors are not evaluated by this renderer")
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    context = {
        **variant(recipe_dir),
        # conda-build passes the host interpreter's path; the script only interpolates it.
        "PYTHON": "$PYTHON",
        "load_file_data": make_load_file_data(recipe_dir),
    }
    return env.from_string(source).render(context)


def render(recipe_dir: Path) -> dict[str, Any]:
    """The recipe's meta.yaml after Jinja, parsed."""
    return yaml.safe_load(render_text(recipe_dir))
