"""Static checks of conda-recipe/: it renders, follows conda-forge's conventions, and
its pins equal runtime/pyproject.toml and env/versions.toml."""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
RECIPE_DIR = ROOT / "conda-recipe"
# pip distribution name -> conda-forge package name, where they differ.
CONDA_NAME = {"torch": "pytorch"}


def specs(entries: list[str]) -> dict[str, str]:
    """Map each requirement line ('name spec [build]') to its spec text."""
    out = {}
    for entry in entries:
        name, _, rest = entry.partition(" ")
        assert name not in out, f"{name} listed twice"
        out[name] = rest.strip()
    return out


def lower_bound(spec: str) -> Version:
    """The version of the single '>=' clause of a conda version spec."""
    floors = [c[2:] for c in spec.split(" ")[0].split(",") if c.startswith(">=")]
    assert len(floors) == 1, f"expected one '>=' bound in {spec!r}"
    return Version(floors[0])


def requires_python_floor(spec: str) -> str:
    """'3.11' from a specifier such as '>=3.11' or '>=3.11,<3.13'."""
    floors = [s.version for s in SpecifierSet(spec) if s.operator == ">="]
    assert len(floors) == 1, f"expected one '>=' bound in {spec!r}"
    return floors[0]


def test_renders_with_conda_build_context(recipe, pyproject):
    assert recipe["package"]["name"] == pyproject["project"]["name"]
    assert str(recipe["package"]["version"]) == pyproject["project"]["version"]


def test_required_sections_present(recipe):
    for section in ("package", "source", "build", "requirements", "test", "about"):
        assert recipe.get(section), f"meta.yaml has no {section} section"
    assert set(recipe["requirements"]) >= {"host", "run"}


def test_source_is_the_runtime_package(recipe):
    source = (RECIPE_DIR / recipe["source"]["path"]).resolve()
    assert source == ROOT / "runtime"
    assert (source / "pyproject.toml").is_file()


def test_noarch_python_built_with_pip(recipe):
    build = recipe["build"]
    assert build["noarch"] == "python"
    assert build["number"] == 0
    assert "-m pip install ." in build["script"]
    assert "--no-deps" in build["script"]


def test_entry_point_matches_pyproject(recipe, pyproject):
    expected = [f"{name} = {target}" for name, target in pyproject["project"]["scripts"].items()]
    assert recipe["build"]["entry_points"] == expected


def test_python_min_equals_runtime_and_pins(renderer, recipe, pyproject, pins):
    python_min = renderer.variant(RECIPE_DIR)["python_min"]
    assert python_min == requires_python_floor(pyproject["project"]["requires-python"])
    assert python_min == requires_python_floor(pins["python"]["supported"])
    assert f"python {python_min}" in recipe["requirements"]["host"]
    assert f"python >={python_min}" in recipe["requirements"]["run"]
    assert f"python {python_min}" in recipe["test"]["requires"]


def test_run_pins_equal_versions_toml(recipe, pins):
    run = specs(recipe["requirements"]["run"])
    assert run["pytorch"] == f">={pins['torch']['version']} cuda*"
    cuda = Version(pins["torch"]["cuda"])
    assert run["cuda-version"] == f">={pins['torch']['cuda']},<{cuda.major + 1}"
    assert "__cuda" in run
    assert run["flash-linear-attention"] == f">={pins['floor']['flash-linear-attention']}"


def test_fla_floor_is_the_runtime_extras_floor(pins, pyproject):
    floor = Version(pins["floor"]["flash-linear-attention"])
    for extra in ("fla", "flashqla"):
        (fla,) = [
            Requirement(r) for r in pyproject["project"]["optional-dependencies"][extra] if r.startswith("flash-linear")
        ]
        assert [Version(s.version) for s in fla.specifier if s.operator == ">="] == [floor], extra


def test_run_covers_every_runtime_dependency(recipe, pyproject):
    run = specs(recipe["requirements"]["run"])
    for line in pyproject["project"]["dependencies"]:
        req = Requirement(line)
        name = CONDA_NAME.get(req.name, req.name)
        assert name in run, f"runtime dependency {req.name} has no run requirement ({name})"
        floor = [s.version for s in req.specifier if s.operator == ">="]
        if floor:
            # The recipe may ask for more than pip does, never for less.
            assert lower_bound(run[name]) >= Version(floor[0]), f"{name}: {run[name]} below {req}"


def test_flashqla_left_to_pip(recipe, load_yaml):
    run = specs(recipe["requirements"]["run"])
    assert "flash-qla" not in run
    assert "tilelang" not in run
    pip_entries = []
    for name in ("environment.yml", "flashqla.yml"):
        document = load_yaml((ROOT / "env" / "conda" / name).read_text())
        pip_entries += [line for d in document["dependencies"] if isinstance(d, dict) for line in d["pip"]]
    assert {entry.split("==")[0] for entry in pip_entries} >= {"flash-qla", "tilelang"}


def test_package_tests_present(recipe):
    test = recipe["test"]
    assert "slime_flashqla" in test["imports"]
    assert "pip" in test["requires"]
    assert "pip check" in test["commands"]
    assert "slime-flashqla --help" in test["commands"]


def test_license_file_shipped(recipe, pyproject):
    about = recipe["about"]
    assert about["license"] == pyproject["project"]["license"] == "MIT"
    source = RECIPE_DIR / recipe["source"]["path"]
    assert (source / about["license_file"]).is_file()
    assert about["summary"]


def test_renderer_rejects_what_it_does_not_implement(renderer, tmp_path):
    (tmp_path / "meta.yaml").write_text("requirements:\n  build:\n    - {{ compiler('c') }}\n")
    with pytest.raises(Exception, match="compiler"):
        renderer.render(tmp_path)
    (tmp_path / "meta.yaml").write_text("build:\n  skip: true  # [win]\n")
    with pytest.raises(ValueError, match="selectors"):
        renderer.render(tmp_path)
    (tmp_path / "meta.yaml").write_text('{% set d = load_file_data("missing.toml", from_recipe_dir=True) %}\n')
    with pytest.raises(FileNotFoundError):
        renderer.render(tmp_path)
