"""The container images: what each one is, how it is built, labelled and matched to this checkout.

One folder per image under docker/images/<name>/: its Dockerfile and an image.toml (tag, the
[images.<pins>] table of env/versions.toml it is built from, its build arguments and pin labels,
its start-up note). noxfile.py's image sessions are thin wrappers over this module. It knows
nothing of nox and needs only the standard library (it runs on the host before any venv exists):
where the machine lacks something it raises ImageUnavailable (a session skips, or fails where
SLIME_FLASHQLA_REQUIRE_IMAGES=1), where something is wrong ImageError (a session fails).

Knobs (environment):
  SLIME_FLASHQLA_CONTAINER_ENGINE      podman or docker (default: podman if on PATH, else a docker
                                       whose daemon answers)
  SLIME_FLASHQLA_BASE_IMAGE_<PINS>     BASE_IMAGE of the images built from [images.<pins>]
                                       (_DEFAULT, _GB10; CI: its stand-in bases)
  SLIME_FLASHQLA_INSTALL_FLASHQLA      INSTALL_FLASHQLA build argument (0 or 1) of default and gb10
  SLIME_FLASHQLA_REQUIRE_IMAGES=1      fail, instead of skipping, where no engine or base image can
                                       be had, or the image to test was not built from this checkout
  SLIME_FLASHQLA_SOURCE_URL            org.opencontainers.image.source (default: git's origin, when it
                                       is a network URL; a local path is never written)
Each image is built for the platform of its [images.<pins>] table (gb10: linux/arm64, under
qemu-user on an x86_64 builder).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMAGES_DIR = ROOT / "docker" / "images"
VERSIONS = ROOT / "env" / "versions.toml"
RUNTIME = ROOT / "runtime"
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")
# The value of a build argument nothing has fed yet: a missing pin fails the build command
# instead of leaving the Dockerfile's default in place.
NOTSET = "notset"
# What the Dockerfiles COPY: an image's io.slime-flashqla.source-tree label is git's tree of these.
BUILD_INPUTS = ("README.md", "noxfile.py", "env", "docker", "docs", "conda-recipe", "tests", "tools", "runtime")
# The CPU suite in an image of another architecture (GB10's arm64 on an x86_64 builder) runs under
# qemu-user, where every fresh Python process pays torch's import again (13-20 s), so the whole
# suite took longer than CI allows. There it runs the part that exercises the platform's own
# code: the GDN reference, its input checks and both layers on torch's aarch64 CPU kernels,
# without the tests that start processes (`slow`, `distributed`). The image's start-up command and
# its in-image tests cover the CLI and the wheels; the whole suite runs natively in `nox -s tests`
# and in the default image.
EMULATED_SUITE = ("tests/runtime/gdn", "tests/runtime/layers")
EMULATED_MARKERS = "not gpu and not image and not slow and not distributed"
# `uname -m` names -> OCI architectures
OCI_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}
# The in-image tests' parent map (which test folders an image runs), kept with the tests.
HIERARCHY = ROOT / "tests" / "images" / "hierarchy.py"


class ImageUnavailable(Exception):
    """The machine lacks what an image session needs (engine, base image, a matching image): skip."""


class ImageError(Exception):
    """An image, its settings or its labels are wrong: fail."""


@functools.cache
def load_versions(path: Path = VERSIONS) -> Mapping:
    """env/versions.toml, parsed once per process (callers read it, never change it)."""
    return tomllib.loads(path.read_text())


@dataclass(frozen=True)
class Image:
    """One image the sessions build, from docker/images/<name>/image.toml."""

    name: str
    tag: str
    dockerfile: Path  # relative to ROOT
    pins: str  # the [images.<pins>] table of env/versions.toml
    build_args: Mapping[str, str] = field(default_factory=dict)  # ARG -> table.key in env/versions.toml
    fixed_args: Mapping[str, str] = field(default_factory=dict)  # ARG -> value of this image's own
    pin_labels: Mapping[str, str] = field(default_factory=dict)  # label -> ARG whose value it carries
    note: str | None = None  # the start-up self-check's line, {support} filled in

    @property
    def base_env(self) -> str:
        """The environment variable that replaces this image's base."""
        return f"SLIME_FLASHQLA_BASE_IMAGE_{self.pins.upper()}"


def read_image(folder: Path) -> Image:
    """The Image of one docker/images/<name>/ folder (`same_as` takes another folder's settings)."""
    settings = tomllib.loads((folder / "image.toml").read_text())
    own = folder
    if "same_as" in settings:
        own = folder.parent / settings.pop("same_as")
        settings = tomllib.loads((own / "image.toml").read_text()) | settings
    if not (own / "Dockerfile").is_file():
        raise ImageError(f"{folder / 'image.toml'}: no Dockerfile in {own}")
    unknown = set(settings) - {"tag", "pins", "build_args", "fixed_args", "pin_labels", "note"}
    if unknown:
        raise ImageError(f"{folder / 'image.toml'}: unknown settings {sorted(unknown)}")
    return Image(
        name=folder.name,
        tag=settings["tag"],
        dockerfile=(own / "Dockerfile").relative_to(ROOT) if own.is_relative_to(ROOT) else own / "Dockerfile",
        pins=settings["pins"],
        build_args=settings.get("build_args", {}),
        fixed_args=settings.get("fixed_args", {}),
        pin_labels=settings.get("pin_labels", {}),
        note=settings.get("note"),
    )


@functools.cache
def load_images(images_dir: Path = IMAGES_DIR) -> dict[str, Image]:
    """name -> Image for every folder with an image.toml, in name order (gb10 before gb10-flashqla)."""
    return {f.parent.name: read_image(f.parent) for f in sorted(images_dir.glob("*/image.toml"))}


def dockerfiles() -> list[Path]:
    """Every Dockerfile the images are built from, once each (absolute paths)."""
    return list(dict.fromkeys(ROOT / image.dockerfile for image in load_images().values()))


def versions_value(versions: Mapping, key: str) -> str:
    """The value at `table.key` (`images.gb10.cuda`) of env/versions.toml, or NOTSET."""
    value = versions
    for part in key.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return NOTSET
        value = value[part]
    return str(value)


def image_platform(image: Image, versions: Mapping | None = None) -> str:
    """The os/arch the image is built for, from its [images.<pins>] platform."""
    return (versions or load_versions())["images"][image.pins]["platform"]


def base_image(image: Image, env: Mapping[str, str] = os.environ, versions: Mapping | None = None) -> str:
    """The BASE_IMAGE a build of this image uses: the CI/user override, else the pinned base."""
    return env.get(image.base_env) or versions_value(versions or load_versions(), f"images.{image.pins}.base")


def flashqla_support_label(version: str) -> str:
    """What flash-qla `version` runs per GPU, from the runtime's support table (loaded by path: no torch)."""
    path = RUNTIME / "slime_flashqla" / "gdn" / "backends" / "flashqla" / "releases.py"
    spec = importlib.util.spec_from_file_location("_slime_flashqla_support", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module.support_label(version)


def git(*args: str) -> str:
    """Output of a git command in this checkout, or 'unknown' where git cannot tell."""
    try:
        done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)
    except FileNotFoundError:  # no git here (a source tree copied into an image)
        return "unknown"
    return done.stdout.strip() if done.returncode == 0 else "unknown"


def build_args(
    image: Image,
    *,
    env: Mapping[str, str] = os.environ,
    versions: Mapping | None = None,
    revision: str | None = None,
) -> dict[str, str]:
    """Every build argument of the image: pins from env/versions.toml, provenance from git, base from env.

    Each argument starts as NOTSET; one still NOTSET when all are fed (a key missing from
    env/versions.toml) is an ImageError naming it, not a silent Dockerfile default.
    """
    versions = versions or load_versions()
    project = tomllib.loads((RUNTIME / "pyproject.toml").read_text())["project"]
    flash_qla = versions_value(versions, "packages.flash-qla")
    args = dict.fromkeys(("VERSION", "REVISION", *image.build_args, "FLASHQLA_SUPPORT", "BASE_IMAGE"), NOTSET)
    args |= {key: versions_value(versions, where) for key, where in image.build_args.items()}
    args |= {
        "VERSION": project["version"],
        "REVISION": revision if revision is not None else git("rev-parse", "HEAD"),
        "FLASHQLA_SUPPORT": flashqla_support_label(flash_qla) if flash_qla != NOTSET else NOTSET,
        "BASE_IMAGE": base_image(image, env, versions),
    }
    flashqla = env.get("SLIME_FLASHQLA_INSTALL_FLASHQLA")
    if flashqla:
        args["INSTALL_FLASHQLA"] = flashqla
    args |= image.fixed_args
    where = {**image.build_args, "FLASHQLA_SUPPORT": "packages.flash-qla", "BASE_IMAGE": f"images.{image.pins}.base"}
    missing = [f"{key} (env/versions.toml {where[key]})" for key, value in args.items() if value == NOTSET]
    if missing:
        raise ImageError(f"{image.name}: build arguments with no value: {', '.join(missing)}")
    return args


def flags(option: str, values: Mapping[str, str]) -> list[str]:
    """`--build-arg K=V` / `--label K=V` pairs."""
    return [flag for key, value in values.items() for flag in (option, f"{key}={value}")]


def expected_pin_labels(image: Image, versions: Mapping | None = None) -> dict[str, str]:
    """The io.slime-flashqla.pins.* (and flashqla-support) labels an image must carry."""
    args = build_args(image, env={}, versions=versions, revision="unknown")
    return {label: args[arg] for label, arg in image.pin_labels.items()}


def source_tree() -> str:
    """git's tree id of the build inputs as they are on disk now (edits and new files included)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        # A throw-away index: the user's own index and stash are left alone.
        env = {**os.environ, "GIT_INDEX_FILE": str(Path(tmp) / "index")}
        try:
            added = subprocess.run(
                ["git", "-C", str(ROOT), "add", "--all", "--", *BUILD_INPUTS], env=env, capture_output=True
            )
            done = subprocess.run(["git", "-C", str(ROOT), "write-tree"], env=env, capture_output=True, text=True)
        except FileNotFoundError:
            return "unknown"
        return done.stdout.strip() if not added.returncode and not done.returncode else "unknown"


def source_url() -> str | None:
    """Where the source can be fetched from: SLIME_FLASHQLA_SOURCE_URL, else a network origin URL."""
    return source_url_of(os.environ.get("SLIME_FLASHQLA_SOURCE_URL") or git("remote", "get-url", "origin"))


def source_url_of(url: str) -> str | None:
    """`url` as a label value: a network URL without user or token, else None."""
    if re.match(r"^(https?|ssh|git)://", url):
        return re.sub(r"^(https?://)[^/@]+@", r"\1", url)  # never a user or token
    if re.match(r"^[\w.-]+@[\w.-]+:", url):  # scp-like git@host:owner/repo
        return url
    return None  # a local path (a clone of a clone) says nothing to whoever pulls the image


def provenance_labels() -> dict[str, str]:
    """OCI labels only the build command knows: when, and from where (the revision is a build arg)."""
    import datetime

    epoch = os.environ.get("SOURCE_DATE_EPOCH")  # reproducible builds pin the date
    when = datetime.datetime.fromtimestamp(int(epoch), datetime.UTC) if epoch else datetime.datetime.now(datetime.UTC)
    labels = {
        "org.opencontainers.image.created": when.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "io.slime-flashqla.source-tree": source_tree(),
    }
    url = source_url()
    if url:
        labels["org.opencontainers.image.source"] = url
    return labels


def container_engine(env: Mapping[str, str] = os.environ) -> str:
    """The container CLI to use; ImageUnavailable without one, ImageError for a named one not on PATH."""
    wanted = env.get("SLIME_FLASHQLA_CONTAINER_ENGINE")
    if wanted and not shutil.which(wanted):
        raise ImageError(f"SLIME_FLASHQLA_CONTAINER_ENGINE={wanted} is not on PATH")
    engine, reason = wanted, ""
    if not engine and shutil.which("podman"):
        engine = "podman"
    elif not engine and shutil.which("docker"):
        # A docker CLI without a reachable daemon (as on CI) cannot build anything.
        alive = subprocess.run(["docker", "info"], capture_output=True).returncode == 0
        engine = "docker" if alive else None
        reason = "docker is on PATH but its daemon does not answer (`docker info` failed)"
    if engine:
        return engine
    raise ImageUnavailable(f"{reason or 'neither podman nor docker is on PATH'}: the image sessions need one")


def ensure_base_image(engine: str, image: Image, log: Callable[[str], None], *pull_flags: str) -> None:
    """Have the image's base locally, pulling it if needed; ImageUnavailable where it cannot be had."""
    base = base_image(image)
    if subprocess.run([engine, "image", "inspect", base], capture_output=True).returncode == 0:
        return
    log(f"{base} is not here: {engine} pull {base}")
    pull = subprocess.Popen([engine, "pull", *pull_flags, base], stderr=subprocess.PIPE, text=True)
    last = ""
    for line in pull.stderr:  # progress goes to stderr; keep its last line for the reason
        print(line, end="", file=sys.stderr)
        last = line.strip() or last
    if pull.wait():
        raise ImageUnavailable(
            f"base image {base} is not here and cannot be pulled ({last or f'{engine} pull failed'}): "
            f"the image sessions need a registry that serves it, or a local base image named by {image.base_env}"
        )


def build_command(engine: str, image: Image, posargs: tuple[str, ...] | list[str] = ()) -> list[str]:
    """The whole `<engine> build` command line of an image, posargs last before the context."""
    extra = ["--platform", image_platform(image)]
    if engine == "podman":
        # podman's OCI format drops SHELL (the Dockerfiles need bash); host networking and
        # the host's CA bundle let pip inside the build reach the index as the host does.
        extra += ["--format", "docker", "--network", "host"]
        if HOST_CA.is_file():
            extra += ["-v", f"{HOST_CA}:{HOST_CA}:ro"]
    return [
        engine, "build", *extra, *flags("--build-arg", build_args(image)), *flags("--label", provenance_labels()),
        "-f", str(ROOT / image.dockerfile), "-t", image.tag, *posargs, str(ROOT),
    ]  # fmt: skip


def image_id(engine: str, tag: str) -> str:
    """The ID of the image under `tag`."""
    inspect = [engine, "image", "inspect", "--format", "{{.Id}}", tag]
    return subprocess.run(inspect, capture_output=True, text=True, check=True).stdout.strip()


def image_to_test(engine: str, image: Image, built: Mapping[str, str | None], log: Callable[[str], None]) -> str:
    """The ID of the image this checkout built; ImageUnavailable for any other image.

    `built`: name -> image ID that image_build built in this nox run (None: it ran and built nothing).
    """
    tag, name = image.tag, image.name
    build = f"nox -s 'image_build({name})'"
    if name in built and built[name] is None:
        raise ImageUnavailable(f"image_build({name}) built no image in this run (its message says why)")
    ref = built.get(name) or tag
    fields = "{{.Id}} {{.Os}}/{{.Architecture}} {{json .Config.Labels}}"
    done = subprocess.run([engine, "image", "inspect", "--format", fields, ref], capture_output=True, text=True)
    if done.returncode:
        raise ImageUnavailable(f"image {tag} is not built: run `{build}` first")
    found_id, built_for, labels_json = done.stdout.strip().split(" ", 2)
    if built_for != image_platform(image):
        raise ImageError(f"{tag} is {built_for}, but env/versions.toml builds it for {image_platform(image)}")
    log(f"{tag}: {built_for}")
    labels = json.loads(labels_json) or {}
    check_labels(image, labels)
    # An image from another commit, or from this commit with other edits, would test other code.
    built_from = (labels.get("org.opencontainers.image.revision"), labels.get("io.slime-flashqla.source-tree"))
    checkout = (git("rev-parse", "HEAD"), source_tree())
    if built.get(name):
        # Built a moment ago from these files: its labels must say so, or the labelling is broken.
        if built_from != checkout:
            raise ImageError(f"{tag} was just built, but its labels {built_from} do not name this checkout {checkout}")
        return found_id
    if "unknown" in checkout:
        raise ImageUnavailable(f"git cannot tell this checkout's revision and files, so {tag} cannot be matched to it")
    if built_from != checkout:
        raise ImageUnavailable(
            f"{tag} was built from revision {built_from[0]} with source tree {built_from[1]}, not from this "
            f"checkout (revision {checkout[0]}, source tree {checkout[1]}): run `{build}` first"
        )
    return found_id


def check_labels(image: Image, labels: Mapping[str, str]) -> None:
    """ImageError where an image's pin or provenance labels are wrong."""
    tag = image.tag
    wrong = {k: (labels.get(k), v) for k, v in expected_pin_labels(image).items() if labels.get(k) != v}
    if wrong:
        raise ImageError(f"{tag}: OCI labels (label, pinned) disagree with env/versions.toml: {wrong}")
    if not labels.get("org.opencontainers.image.created"):
        raise ImageError(f"{tag}: no org.opencontainers.image.created label")
    source = labels.get("org.opencontainers.image.source")
    if source is not None and source_url_of(source) != source:
        raise ImageError(f"{tag}: org.opencontainers.image.source {source!r} is not a network URL without credentials")


def gpu_run_flags(engine: str) -> list[str]:
    """Flags that hand this host's NVIDIA GPUs to a container; empty where there are none."""
    if not shutil.which("nvidia-smi") or subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode:
        return []
    # podman reaches GPUs through CDI (nvidia-ctk cdi generate); docker through its nvidia runtime.
    gpus = ["--device", "nvidia.com/gpu=all"] if engine == "podman" else ["--gpus", "all"]
    return [*gpus, "--shm-size", "16g"]


def runs_natively(image: Image, machine: str) -> bool:
    """Whether the image's architecture is this host's (`uname -m`), so no qemu-user is in the way."""
    return image_platform(image).split("/")[1] == OCI_ARCH.get(machine, machine)


def in_image_test_dirs(image: Image) -> list[str]:
    """The in-image test folders the image runs, root first: its own and its parents' (tests/images/hierarchy.py)."""
    spec = importlib.util.spec_from_file_location("_slime_flashqla_image_hierarchy", HIERARCHY)
    hierarchy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hierarchy)
    return [f"tests/images/{name}" for name in reversed(hierarchy.lineage(image.name))]
