"""docker/images.py: one folder per image, one versions file feeding every build argument, the sessions' names."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest

from helpers.repo_modules import ROOT, images

IMAGES = images()
VERSIONS = IMAGES.load_versions()
# Each image's tag and build arguments: the names the sessions, CI and the docs build and run by.
TAGS = {
    "default": "slime-flashqla:latest",
    "gb10": "slime-flashqla:gb10",
    "gb10-flashqla": "slime-flashqla:gb10-flashqla",
}
COMMON_ARGS = ("VERSION", "REVISION", "FLA_VERSION", "FLASH_QLA_VERSION", "TILELANG_VERSION", "FLASHQLA_SUPPORT")
ARGS = {
    "default": {*COMMON_ARGS, "TORCH_VERSION", "TORCH_CUDA_VERSION", "BASE_IMAGE"},
    "gb10": {*COMMON_ARGS, "BASE_CUDA_VERSION", "BASE_IMAGE"},
    "gb10-flashqla": {*COMMON_ARGS, "BASE_CUDA_VERSION", "BASE_IMAGE", "INSTALL_FLASHQLA"},
}


def dockerfile_args(image) -> dict[str, str]:
    """ARG NAME=default pairs of the image's Dockerfile."""
    return dict(re.findall(r"^ARG (\w+)=(\S*)$", (ROOT / image.dockerfile).read_text(), re.MULTILINE))


def image(name: str):
    return IMAGES.load_images()[name]


def test_each_image_is_one_folder_with_its_tag_and_dockerfile():
    found = IMAGES.load_images()
    assert {name: i.tag for name, i in found.items()} == TAGS
    assert list(found) == sorted(found)  # gb10 builds before gb10-flashqla, which reuses its layers
    assert image("default").dockerfile == Path("docker/images/default/Dockerfile")
    assert image("gb10").dockerfile == Path("docker/images/gb10/Dockerfile")
    assert image("gb10-flashqla").dockerfile == image("gb10").dockerfile
    assert [p.relative_to(ROOT).as_posix() for p in IMAGES.dockerfiles()] == [
        "docker/images/default/Dockerfile",
        "docker/images/gb10/Dockerfile",
    ]


@pytest.mark.parametrize("name", list(TAGS))
def test_each_image_gets_its_build_arguments_and_their_pinned_values(name):
    args = IMAGES.build_args(image(name), env={}, revision="abc123")
    assert set(args) == ARGS[name]
    assert args["REVISION"] == "abc123"
    assert args["FLA_VERSION"] == VERSIONS["packages"]["flash-linear-attention"]
    assert args["FLASH_QLA_VERSION"] == VERSIONS["packages"]["flash-qla"]
    assert args["TILELANG_VERSION"] == VERSIONS["packages"]["tilelang"]
    assert args["BASE_IMAGE"] == VERSIONS["images"][image(name).pins]["base"]
    if name == "default":
        assert (args["TORCH_VERSION"], args["TORCH_CUDA_VERSION"]) == (
            VERSIONS["torch"]["version"],
            VERSIONS["torch"]["cuda"],
        )
    else:
        assert args["BASE_CUDA_VERSION"] == VERSIONS["images"]["gb10"]["cuda"]


@pytest.mark.parametrize("name", list(TAGS))
def test_one_versions_file_feeds_every_build_argument_of_the_dockerfile(name):
    """Every ARG is passed by the build (none left to its default); INSTALL_FLASHQLA is the opt-in knob."""
    args = IMAGES.build_args(image(name), env={}, revision="abc123")
    assert set(dockerfile_args(image(name))) - {"INSTALL_FLASHQLA"} == set(args) - {"INSTALL_FLASHQLA"}
    for arg, where in image(name).build_args.items():
        assert args[arg] == IMAGES.versions_value(VERSIONS, where) != IMAGES.NOTSET, arg


@pytest.mark.parametrize("name", list(TAGS))
def test_pin_labels_name_the_build_arguments_the_dockerfile_writes_into_them(name):
    text = (ROOT / image(name).dockerfile).read_text()
    for label, arg in image(name).pin_labels.items():
        assert f'{label}="${{{arg}}}"' in text, label
    labels = IMAGES.expected_pin_labels(image(name))
    assert labels["io.slime-flashqla.pins.flash-qla"] == VERSIONS["packages"]["flash-qla"]
    cuda = VERSIONS["torch"]["cuda"] if name == "default" else VERSIONS["images"]["gb10"]["cuda"]
    assert labels["io.slime-flashqla.pins.cuda"] == cuda


@pytest.mark.parametrize(
    ("drop", "named"),
    [
        (("packages", "tilelang"), "TILELANG_VERSION (env/versions.toml packages.tilelang)"),
        (("packages", "flash-qla"), "FLASH_QLA_VERSION (env/versions.toml packages.flash-qla)"),
        (("images", "gb10", "cuda"), "BASE_CUDA_VERSION (env/versions.toml images.gb10.cuda)"),
        (("images", "gb10", "base"), "BASE_IMAGE (env/versions.toml images.gb10.base)"),
    ],
)
def test_a_build_argument_with_no_value_stays_notset_and_fails(drop, named):
    versions = copy.deepcopy(dict(VERSIONS))
    table = versions
    for key in drop[:-1]:
        table = table[key]
    del table[drop[-1]]
    with pytest.raises(IMAGES.ImageError, match=re.escape(named)):
        IMAGES.build_args(image("gb10"), env={}, versions=versions, revision="abc123")


def test_the_environment_overrides_base_and_flashqla_but_not_an_images_own_arguments():
    env = {"SLIME_FLASHQLA_BASE_IMAGE_GB10": "localhost/stand-in:gb10", "SLIME_FLASHQLA_INSTALL_FLASHQLA": "0"}
    for name, flashqla in (("gb10", "0"), ("gb10-flashqla", "1")):
        args = IMAGES.build_args(image(name), env=env, revision="abc123")
        assert args["BASE_IMAGE"] == "localhost/stand-in:gb10"
        assert args["INSTALL_FLASHQLA"] == flashqla
    assert (
        IMAGES.build_args(image("default"), env=env, revision="x")["BASE_IMAGE"]
        == VERSIONS["images"]["default"]["base"]
    )


def test_platforms_come_from_the_pins_tables():
    assert IMAGES.image_platform(image("default")) == "linux/amd64"
    assert IMAGES.image_platform(image("gb10-flashqla")) == "linux/arm64"
    assert IMAGES.runs_natively(image("default"), "x86_64")
    assert not IMAGES.runs_natively(image("gb10"), "x86_64")
    assert IMAGES.runs_natively(image("gb10"), "aarch64")


def test_build_command_passes_platform_args_labels_dockerfile_tag_then_posargs_then_context():
    command = IMAGES.build_command("podman", image("gb10-flashqla"), ["--no-cache"])
    assert command[:4] == ["podman", "build", "--platform", "linux/arm64"]
    assert "--format" in command and command[command.index("--format") + 1] == "docker"
    assert "INSTALL_FLASHQLA=1" in command and command[command.index("INSTALL_FLASHQLA=1") - 1] == "--build-arg"
    assert any(c.startswith("org.opencontainers.image.created=") for c in command)
    assert command[command.index("-f") + 1] == str(ROOT / "docker/images/gb10/Dockerfile")
    assert command[-4:] == ["-t", "slime-flashqla:gb10-flashqla", "--no-cache", str(ROOT)]
    assert "--format" not in IMAGES.build_command("docker", image("default"))


@pytest.mark.parametrize(
    ("url", "label"),
    [
        ("https://user:token@github.com/o/r.git", "https://github.com/o/r.git"),
        ("git@github.com:o/r.git", "git@github.com:o/r.git"),
        ("/work/main", None),
    ],
)
def test_source_url_never_carries_credentials_or_a_local_path(url, label):
    assert IMAGES.source_url_of(url) == label


def test_in_image_test_folders_follow_the_parent_map():
    assert IMAGES.in_image_test_dirs(image("default")) == ["tests/images/shared", "tests/images/default"]
    assert IMAGES.in_image_test_dirs(image("gb10-flashqla")) == [
        "tests/images/shared",
        "tests/images/gb10",
        "tests/images/gb10-flashqla",
    ]
    for name in TAGS:  # every image has its folder of tests, and so does every folder's parent
        for folder in IMAGES.in_image_test_dirs(image(name)):
            assert (ROOT / folder).is_dir(), folder


def test_an_image_missing_from_the_parent_map_is_named():
    with pytest.raises(KeyError, match=re.escape("no entry in tests/images/hierarchy.py")):
        IMAGES.in_image_test_dirs(IMAGES.Image("new", "t", Path("x"), "default"))


def test_same_as_takes_the_other_images_settings_and_a_folder_without_dockerfile_is_refused(tmp_path):
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "Dockerfile").write_text("FROM scratch\n")
    (tmp_path / "base" / "image.toml").write_text('tag = "a:base"\npins = "default"\nnote = "n"\n')
    (tmp_path / "opt").mkdir()
    (tmp_path / "opt" / "image.toml").write_text('same_as = "base"\ntag = "a:opt"\n[fixed_args]\nX = "1"\n')
    (tmp_path / "lost").mkdir()
    (tmp_path / "lost" / "image.toml").write_text('tag = "a:lost"\npins = "default"\n')
    opt = IMAGES.read_image(tmp_path / "opt")
    assert (opt.name, opt.tag, opt.pins, opt.note, dict(opt.fixed_args)) == ("opt", "a:opt", "default", "n", {"X": "1"})
    assert opt.dockerfile == tmp_path / "base" / "Dockerfile"
    with pytest.raises(IMAGES.ImageError, match="no Dockerfile"):
        IMAGES.read_image(tmp_path / "lost")
    (tmp_path / "lost" / "Dockerfile").write_text("FROM scratch\n")
    (tmp_path / "lost" / "image.toml").write_text('tag = "a"\npins = "default"\nplatform = "x"\n')
    with pytest.raises(IMAGES.ImageError, match="unknown settings"):
        IMAGES.read_image(tmp_path / "lost")


def test_no_container_engine_is_unavailable_not_an_error(monkeypatch):
    monkeypatch.setattr(IMAGES.shutil, "which", lambda _: None)
    with pytest.raises(IMAGES.ImageUnavailable, match="neither podman nor docker is on PATH"):
        IMAGES.container_engine({})
    with pytest.raises(IMAGES.ImageError, match="SLIME_FLASHQLA_CONTAINER_ENGINE=podman is not on PATH"):
        IMAGES.container_engine({"SLIME_FLASHQLA_CONTAINER_ENGINE": "podman"})


def test_an_image_built_with_other_pins_is_refused_by_its_labels():
    labels = IMAGES.expected_pin_labels(image("default")) | {"org.opencontainers.image.created": "2026-12-02T00:00:00Z"}
    IMAGES.check_labels(image("default"), labels)
    with pytest.raises(IMAGES.ImageError, match=re.escape("disagree with env/versions.toml")):
        IMAGES.check_labels(image("default"), labels | {"io.slime-flashqla.pins.tilelang": "0.0.1"})
    with pytest.raises(IMAGES.ImageError, match="not a network URL"):
        IMAGES.check_labels(image("default"), labels | {"org.opencontainers.image.source": "/work/main"})
