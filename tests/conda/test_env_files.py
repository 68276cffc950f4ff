"""Static checks of env/conda/*.yml: every version in them equals env/versions.toml."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

CONDA_ENV_DIR = Path(__file__).resolve().parents[2] / "env" / "conda"
ENV_FILES = ("environment.yml", "flashqla.yml")


def conda_specs(document: dict) -> dict[str, str]:
    """Map each conda dependency to its spec text: 'pytorch=2.8.0=cuda*' -> '=2.8.0=cuda*'."""
    out: dict[str, str] = {}
    for entry in document["dependencies"]:
        if isinstance(entry, dict):
            continue
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)(.*)", entry.replace(" ", ""))
        assert match, f"unreadable dependency {entry!r}"
        name, spec = match.groups()
        assert name not in out, f"{name} listed twice"
        out[name] = spec
    return out


def pip_pins(document: dict) -> dict[str, str]:
    """Map each pip requirement of the file's pip section to its exact version."""
    out = {}
    for entry in document["dependencies"]:
        if not isinstance(entry, dict):
            continue
        for line in entry["pip"]:
            name, sep, version = line.partition("==")
            assert sep, f"pip requirement {line!r} is not pinned with =="
            out[name] = version
    return out


@pytest.fixture(scope="module")
def env_files(load_yaml) -> dict[str, dict]:
    """Both environment files, parsed."""
    return {name: load_yaml((CONDA_ENV_DIR / name).read_text()) for name in ENV_FILES}


@pytest.mark.parametrize("name", ENV_FILES)
def test_conda_forge_only(env_files, name):
    assert env_files[name]["channels"] == ["conda-forge", "nodefaults"]
    assert "pip" in conda_specs(env_files[name])


def test_python_equals_pins(env_files, pins):
    assert conda_specs(env_files["environment.yml"])["python"] == f"={pins['python']['version']}"


def test_torch_is_the_pinned_cuda_build(env_files, pins):
    base = conda_specs(env_files["environment.yml"])
    assert base["pytorch"] == f"={pins['torch']['version']}=cuda*"
    assert base["cuda-version"] == f"={pins['torch']['cuda']}"


def test_pip_pins_equal_versions_toml(env_files, pins):
    seen = {}
    for name in ENV_FILES:
        for package, version in pip_pins(env_files[name]).items():
            assert package in pins["packages"], f"{name}: {package} is not pinned in env/versions.toml"
            assert version == pins["packages"][package], f"{name}: {package}=={version}"
            assert package not in seen, f"{package} in both {seen.get(package)} and {name}"
            seen[package] = name
    assert seen == {
        "flash-linear-attention": "environment.yml",
        "fla-core": "environment.yml",
        "tilelang": "environment.yml",
        "flash-qla": "flashqla.yml",
    }


def test_opt_out_keeps_tilelang_and_its_compiler(env_files):
    # FLA's GDN backward on Hopper needs TileLang with torch 2.8's Triton, so only
    # flash-qla itself may sit in the layer that --no-flashqla leaves out.
    base = env_files["environment.yml"]
    assert {"cuda-nvcc", "cuda-cudart-dev"} <= set(conda_specs(base))
    assert "tilelang" in pip_pins(base)
    assert set(pip_pins(env_files["flashqla.yml"])) == {"flash-qla"}
