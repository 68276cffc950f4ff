"""env/versions.toml is the one source of pins: derived files, Dockerfiles, docs and recipe agree with it."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from slime_flashqla.gdn.backends.flashqla.releases import support_label

ROOT = Path(__file__).resolve().parents[2]
VERSIONS = tomllib.loads((ROOT / "env" / "versions.toml").read_text())
PACKAGES = VERSIONS["packages"]
DOCKERFILES = {kind: ROOT / "docker" / "images" / kind / "Dockerfile" for kind in ("default", "gb10")}
DOCS = [ROOT / "docs" / lang / "install_flashqla.md" for lang in ("en", "zh")]
RECIPE = ROOT / "conda-recipe" / "meta.yaml"
# Names under which a pinned package may be written down, in pip and conda spelling.
ALIASES = {
    "torch": "torch",
    "pytorch": "torch",
    "flash-linear-attention": "flash-linear-attention",
    "fla-core": "fla-core",
    "flash-qla": "flash-qla",
    "tilelang": "tilelang",
}


def pin_of(name: str) -> str:
    """The pinned version of a package, by its pip name."""
    return VERSIONS["torch"]["version"] if name == "torch" else PACKAGES[name]


def arg_defaults(dockerfile: Path) -> dict[str, str]:
    """ARG NAME=default pairs of a Dockerfile."""
    return dict(re.findall(r"^ARG (\w+)=(\S*)$", dockerfile.read_text(), re.MULTILINE))


def render_check(env_dir: Path) -> subprocess.CompletedProcess:
    """Run env/render.py --check on an env/ folder."""
    return subprocess.run(
        [sys.executable, str(env_dir / "render.py"), "--check"], capture_output=True, text=True, timeout=60
    )


def test_derived_files_are_current():
    done = render_check(ROOT / "env")
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda s: s.replace('tilelang = "0.1.15"', 'tilelang = "0.1.14"'), "made from other pins"),
        (lambda s: s.replace('version = "2.8.0"', 'version = "2.8.1"'), "torch==2.8.0, pinned 2.8.1"),
    ],
)
def test_render_check_catches_a_pin_change_without_a_rerender(tmp_path, edit, message):
    shutil.copytree(ROOT / "env", tmp_path / "env")
    toml = tmp_path / "env" / "versions.toml"
    toml.write_text(edit(toml.read_text()))
    done = render_check(tmp_path / "env")
    assert done.returncode == 1
    assert message in done.stderr
    assert "python env/render.py" in done.stderr


def test_lock_carries_every_pin_and_cuda_of_torch():
    sys.path.insert(0, str(ROOT / "env"))
    try:
        from render import lock_paths, locked_versions
    finally:
        sys.path.pop(0)
    for python in VERSIONS["lock"]["pythons"]:
        main, flashqla = lock_paths(python)
        locked = locked_versions(main.read_text()) | locked_versions(flashqla.read_text())
        assert locked["torch"] == VERSIONS["torch"]["version"]
        for name, version in PACKAGES.items():
            assert locked[name] == version, (python, name)
        # torch's CUDA user-space wheels are the pinned CUDA release, as is CI's stand-in nvcc.
        assert locked["nvidia-cuda-runtime-cu12"] == VERSIONS["ci"]["cuda_runtime"]
        assert locked["nvidia-cuda-runtime-cu12"].startswith(VERSIONS["torch"]["cuda"] + ".")
        assert locked["nvidia-cuda-nvrtc-cu12"].startswith(VERSIONS["torch"]["cuda"] + ".")
        # Hopper stacks must carry TileLang (FLA #640, #983): it is in the main lock itself.
        assert "tilelang" in locked_versions(main.read_text())
        assert set(locked_versions(flashqla.read_text())) == {"flash-qla"}


@pytest.mark.parametrize("variant", list(DOCKERFILES))
def test_base_images_are_fully_qualified(variant):
    # podman resolves no short names without registry aliases; docker.io/... works for both.
    registry = VERSIONS["images"][variant]["base"].split("/", 1)[0]
    assert "." in registry, VERSIONS["images"][variant]["base"]


@pytest.mark.parametrize("variant", list(DOCKERFILES))
def test_dockerfile_defaults_match_the_pins(variant):
    args = arg_defaults(DOCKERFILES[variant])
    image = VERSIONS["images"][variant]
    assert args["BASE_IMAGE"] == image["base"]
    assert args["FLA_VERSION"] == PACKAGES["flash-linear-attention"]
    assert args["FLASH_QLA_VERSION"] == PACKAGES["flash-qla"]
    assert args["TILELANG_VERSION"] == PACKAGES["tilelang"]
    assert args["FLASHQLA_SUPPORT"] == support_label(PACKAGES["flash-qla"])
    assert 'io.slime-flashqla.flashqla-support="${FLASHQLA_SUPPORT}"' in DOCKERFILES[variant].read_text()
    if variant == "default":
        assert args["TORCH_VERSION"] == VERSIONS["torch"]["version"]
        assert args["TORCH_CUDA_VERSION"] == VERSIONS["torch"]["cuda"]
        assert args["INSTALL_FLASHQLA"] == "1"
        assert f"cuda:{VERSIONS['torch']['cuda']}." in image["base"]
    else:
        assert args["BASE_CUDA_VERSION"] == image["cuda"]
        assert args["INSTALL_FLASHQLA"] == "0"


def test_every_version_written_in_the_docs_is_the_pinned_one():
    names = "|".join(re.escape(n) for n in ALIASES)
    for doc in DOCS:
        text = doc.read_text()
        for name, version in re.findall(rf"\b({names})\s*==\s*([0-9][\w.+]*)", text):
            assert version == pin_of(ALIASES[name]), f"{doc.relative_to(ROOT)}: {name}=={version}"
        for tag in re.findall(r"[\w.-]*/?nvidia/cuda:[\w.-]+|[\w.-]*/?nvidia/pytorch:[\w.-]+", text):
            assert tag in (VERSIONS["images"]["default"]["base"], VERSIONS["images"]["gb10"]["base"]), tag


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.parent.name)
def test_docs_state_the_pinned_stack(doc):
    text = doc.read_text()
    for name in ("flash-linear-attention", "flash-qla", "tilelang"):
        assert f"{name}=={PACKAGES[name]}" in text, name
    assert f"torch=={VERSIONS['torch']['version']}" in text
    assert f"CUDA {VERSIONS['torch']['cuda']}" in text
    assert VERSIONS["images"]["default"]["base"] in text
    assert VERSIONS["images"]["gb10"]["base"] in text


def test_conda_recipe_agrees_with_the_pins():
    if not RECIPE.exists():
        pytest.skip("conda-recipe/meta.yaml is not in this tree")
    text = RECIPE.read_text()
    names = "|".join(re.escape(n) for n in ALIASES)
    literal = re.findall(rf"^\s*-\s*({names})\s*(?:==|=|>=)?\s*([0-9][\w.]*)", text, re.MULTILINE)
    for name, version in literal:
        assert version == pin_of(ALIASES[name]), f"conda-recipe/meta.yaml: {name} {version}"
    # Versions the recipe does not spell out must be read from the pins file.
    if not literal:
        assert "env/versions.toml" in text and "load_file_data" in text


def test_stack_constraints_pin_the_whole_default_stack():
    stack = (ROOT / "env" / "stack.txt").read_text()
    pins = dict(re.findall(r"^([a-z0-9-]+)==([^\s;]+)$", stack, re.MULTILINE))
    assert pins["torch"] == VERSIONS["torch"]["version"]
    for name, version in PACKAGES.items():
        assert pins[name] == version, name
    assert pins["nvidia-cuda-runtime-cu12"].startswith(VERSIONS["torch"]["cuda"] + ".")
    # numpy differs between the CPython locks: one line per CPython range, none left unpinned.
    numpy = re.findall(r"^numpy==\S+ ; python_version .*$", stack, re.MULTILINE)
    assert len(numpy) == len(VERSIONS["lock"]["pythons"]), numpy


def test_readme_main_command_installs_through_the_stack_constraints():
    readme = (ROOT / "README.md").read_text()
    block = readme.split("<!-- ci:main-command:begin -->")[1].split("<!-- ci:main-command:end -->")[0]
    assert "-c env/stack.txt" in block
    assert "[cli,flashqla]" in block
    assert "slime-flashqla check" in block


def test_render_check_catches_a_hand_edited_stack(tmp_path):
    shutil.copytree(ROOT / "env", tmp_path / "env")
    stack = tmp_path / "env" / "stack.txt"
    stack.write_text(stack.read_text().replace(f"torch=={VERSIONS['torch']['version']}", "torch==0.0.1"))
    done = render_check(tmp_path / "env")
    assert done.returncode == 1
    assert "env/stack.txt is stale" in done.stderr
