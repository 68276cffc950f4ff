"""Sessions: `nox` runs the default set (what CI runs); `nox -s gpu_tests` checks a GPU node.

Environment knobs:
  SLIME_FLASHQLA_TORCH          pip requirement for torch in the `tests` venv (default:
                                whatever `torch>=2.8` resolves to; CI sets a CPU build).
  SLIME_FLASHQLA_ALLOW_NO_GPU=1 `gpu_tests` skips, instead of failing, where no GPU is visible.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import NamedTuple

import nox

ROOT = Path(__file__).resolve().parent
RUNTIME = ROOT / "runtime"
DEV_TOOLS = ROOT / "env" / "dev-tools.txt"
LINT_TOOLS = ROOT / "env" / "lint.txt"

nox.options.default_venv_backend = "venv"
nox.options.sessions = ["lint", "tests", "hadolint", "image_build", "image_tests"]
nox.options.error_on_missing_interpreters = True


def has_venv(session: nox.Session) -> bool:
    """True when the session runs in its own virtualenv (not with --no-venv)."""
    return not isinstance(session.virtualenv, nox.virtualenv.PassthroughEnv)


def install_runtime(session: nox.Session, *extras: str) -> None:
    """Install torch, the runtime package and the test tools into a session venv."""
    if not has_venv(session):
        # --no-venv (inside an image, on a prepared node): test what is installed.
        return
    torch_spec = os.environ.get("SLIME_FLASHQLA_TORCH")
    if torch_spec:
        session.install(torch_spec)
    extra = f"[{','.join(extras)}]" if extras else ""
    session.install("-r", str(DEV_TOOLS), "-e", f"{RUNTIME}{extra}")


def install_fla_floor(session: nox.Session) -> dict[str, str]:
    """Install the lowest supported FLA (env/versions.toml [floor]) into a folder of its own; env for pytest."""
    import tomllib

    floor = tomllib.loads((ROOT / "env" / "versions.toml").read_text())["floor"]
    fla = floor["flash-linear-attention"]
    target = Path(session.virtualenv.location) / f"fla-floor-{fla}"
    if not (target / "fla").is_dir():
        # --target, --no-deps: beside the session's torch, not instead of it; FLA's own
        # dependencies that the session lacks are named in [floor].
        session.install(
            "--no-deps", "--target", str(target), f"flash-linear-attention=={fla}", f"fla-core=={fla}",
            f"triton=={floor['triton']}", f"einops=={floor['einops']}",
        )  # fmt: skip
    return {"SLIME_FLASHQLA_FLA_FLOOR_PATH": str(target)}


@nox.session
def tests(session: nox.Session) -> None:
    """CPU test suite: unit tests, real gloo processes, CLI; GPU and image tests excluded."""
    install_runtime(session, "cli", "plot")  # plot: the --plot tests draw real PNGs rather than skip
    env = install_fla_floor(session) if has_venv(session) else {}
    session.run(
        "python",
        "-m",
        "pytest",
        str(ROOT / "tests"),
        "-m",
        "not gpu and not image",
        *session.posargs,
        env=env,
    )


def ensure_test_tools(session: nox.Session) -> None:
    """pip-install pytest and pytest-timeout (env/dev-tools.txt's pins) where this python lacks them."""
    import subprocess

    if subprocess.run(["python", "-c", "import pytest, pytest_timeout"], capture_output=True).returncode == 0:
        return
    pins = [line.strip() for line in DEV_TOOLS.read_text().splitlines() if line.startswith(("pytest==", "pytest-"))]
    session.run("python", "-m", "pip", "install", *pins, external=True)


def visible_gpus(session: nox.Session) -> int:
    """How many CUDA devices torch sees from this environment's python."""
    import shutil
    import subprocess

    probe = "import torch; print(torch.cuda.device_count())"
    done = subprocess.run(["python", "-c", probe], capture_output=True, text=True)
    if done.returncode:
        python = shutil.which("python") or "python"
        if "No module named 'torch'" in done.stderr:
            # The README's test command in a venv of its own puts nox where the stack is not.
            session.error(
                f"gpu_tests runs in the environment nox is started from, and its python ({python}) has no torch: "
                "install nox where the stack is installed (`python -m pip install -r env/nox.txt` with that "
                "environment's python) and run `python -m nox -s gpu_tests` from it"
            )
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        session.error(f"gpu_tests: this environment's python ({python}) cannot report its GPUs ({last})")
    return int(done.stdout.strip().splitlines()[-1])


@nox.session(python=False)
def gpu_tests(session: nox.Session) -> None:
    """Parity and behaviour tests on this node's GPU, in the current environment; fails without a GPU."""
    # First: nothing is pip-installed into an environment without the stack, or on a node without a GPU.
    if not visible_gpus(session):
        reason = "no GPU is visible (torch.cuda.device_count() is 0), so nothing here can be checked"
        if os.environ.get("SLIME_FLASHQLA_ALLOW_NO_GPU") == "1":
            session.skip(f"{reason}; SLIME_FLASHQLA_ALLOW_NO_GPU=1 makes that a skip")
        session.error(
            f"{reason}: run it on a GPU node (in a container: --gpus all), or set "
            "SLIME_FLASHQLA_ALLOW_NO_GPU=1 to skip where no GPU is expected (an image built on a GPU-less builder)"
        )
    ensure_test_tools(session)
    session.run("python", "-m", "pytest", str(ROOT / "tests"), "-m", "gpu", "-rs", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff lint and format check over the Python sources."""
    if has_venv(session):
        session.install("-r", str(LINT_TOOLS))
    session.run("ruff", "check", str(ROOT))
    session.run("ruff", "format", "--check", str(ROOT))


# --- conda: the recipe (conda-recipe/), the environment (env/conda/) and their checks ---

CONDA_RECIPE = ROOT / "conda-recipe"
CONDA_CHECK_TOOLS = ROOT / "env" / "conda" / "check-tools.txt"
CONDA_BUILD_ENV = ROOT / ".nox" / "conda-build-env"
CONDA_OUTPUT = ROOT / "build" / "conda"


def conda_builder(session: nox.Session) -> list[str] | None:
    """The conda-build command line to use, installing conda-build beside a conda if needed."""
    import shutil

    if shutil.which("conda-build"):
        return ["conda-build"]
    own = CONDA_BUILD_ENV / "bin" / "conda-build"
    if own.exists():
        return [str(own)]
    tool = next((t for t in ("mamba", "micromamba", "conda") if shutil.which(t)), None)
    if tool is None:
        return None
    # A conda without conda-build: put conda-build in an environment of its own
    # rather than into the user's base environment.
    create = [tool, "create", "--yes", "--prefix", str(CONDA_BUILD_ENV)]
    session.run(*create, "--override-channels", "-c", "conda-forge", "conda-build", external=True)
    return [str(own)]


@nox.session(python=False)
def conda_build(session: nox.Session) -> None:
    """Build and test the conda recipe with conda-build; skip, saying why, where there is no conda."""
    builder = conda_builder(session)
    if builder is None:
        session.skip(
            "no conda-build, conda, mamba or micromamba on PATH, so the recipe cannot be built here "
            "(conda is on neither PyPI nor Debian; rattler-build reads only v1 recipe.yaml, not "
            "meta.yaml). `nox -s conda_check` checks the recipe statically; to build it, install "
            "Miniforge and run `nox -s conda_build` again"
        )
    env = {}
    if "CONDA_OVERRIDE_CUDA" not in os.environ:
        import tomllib

        # The package's run requirements include __cuda; a build host without a GPU
        # driver needs the override to install it for the recipe's tests.
        pins = tomllib.loads((ROOT / "env" / "versions.toml").read_text())
        env["CONDA_OVERRIDE_CUDA"] = pins["torch"]["cuda"]
    session.run(
        *builder,
        str(CONDA_RECIPE),
        "--override-channels",
        "-c",
        "conda-forge",
        "--output-folder",
        str(CONDA_OUTPUT),
        *session.posargs,
        env=env,
        external=True,
    )
    session.log(f"built into {CONDA_OUTPUT}; install it with:")
    session.log(f"  conda install -c {CONDA_OUTPUT} -c conda-forge slime-flashqla")


@nox.session
def conda_check(session: nox.Session) -> None:
    """Static checks of the conda recipe, environment files and create script (runs in CI)."""
    if has_venv(session):
        session.install("-r", str(CONDA_CHECK_TOOLS))
    session.run(
        "python",
        "-m",
        "pytest",
        str(ROOT / "tests" / "conda"),
        *session.posargs,
        env={"SLIME_FLASHQLA_CONDA_CHECK": "1"},
    )


nox.options.sessions.append("conda_check")


# ---- Container images (issue 5): build each Dockerfile, then run the tests inside the image ----
# Knobs:
#   SLIME_FLASHQLA_CONTAINER_ENGINE      podman or docker (default: podman if on PATH, else a docker
#                                        whose daemon answers)
#   SLIME_FLASHQLA_BASE_IMAGE_DEFAULT    BASE_IMAGE for docker/images/default/Dockerfile (CI: its stand-in base)
#   SLIME_FLASHQLA_BASE_IMAGE_GB10       BASE_IMAGE for docker/images/gb10/Dockerfile (CI: its stand-in base)
#   SLIME_FLASHQLA_INSTALL_FLASHQLA      INSTALL_FLASHQLA build argument (0 or 1) of default and gb10
#   SLIME_FLASHQLA_REQUIRE_IMAGES=1      fail, instead of skipping, where no engine or base image can
#                                        be had, or the image to test was not built from this checkout
#   SLIME_FLASHQLA_SOURCE_URL            org.opencontainers.image.source (default: git's origin, when it
#                                        is a network URL; a local path is never written)
# Without an engine, or without the base image (no registry that serves it), the sessions skip,
# saying why: the machine, not the project, lacks something.
# Each image is built for the platform of its [images.<kind>] table in env/versions.toml
# (gb10: linux/arm64, under qemu-user on an x86_64 builder).


class Image(NamedTuple):
    """An image the sessions build: Dockerfile, tag, its [images.<kind>] pins, build args of its own."""

    dockerfile: str
    tag: str
    kind: str
    build_args: dict[str, str]


IMAGES = {
    "default": Image("docker/images/default/Dockerfile", "slime-flashqla:latest", "default", {}),
    "gb10": Image("docker/images/gb10/Dockerfile", "slime-flashqla:gb10", "gb10", {}),
    # FlashQLA opted in on GB10: the same Dockerfile, so it shares gb10's cached layers up to the install.
    "gb10-flashqla": Image(
        "docker/images/gb10/Dockerfile", "slime-flashqla:gb10-flashqla", "gb10", {"INSTALL_FLASHQLA": "1"}
    ),
}
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")
# What the Dockerfiles COPY: an image's io.slime-flashqla.source-tree label is git's tree of these.
BUILD_INPUTS = ("README.md", "noxfile.py", "env", "docker", "docs", "conda-recipe", "tests", "runtime")
# variant -> image ID that image_build built in this nox run (None: it ran and built nothing).
BUILT_THIS_RUN: dict[str, str | None] = {}
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


def skip_or_fail(session: nox.Session, reason: str) -> None:
    """Skip the session for a reason of the machine's; fail instead where CI requires the images."""
    if os.environ.get("SLIME_FLASHQLA_REQUIRE_IMAGES") == "1":
        session.error(f"{reason} (SLIME_FLASHQLA_REQUIRE_IMAGES=1 requires the image sessions to run)")
    session.skip(reason)


def container_engine(session: nox.Session) -> str:
    """The container CLI to use; skips the session (or fails, if images are required) without one."""
    import shutil
    import subprocess

    wanted = os.environ.get("SLIME_FLASHQLA_CONTAINER_ENGINE")
    if wanted and not shutil.which(wanted):
        session.error(f"SLIME_FLASHQLA_CONTAINER_ENGINE={wanted} is not on PATH")
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
    skip_or_fail(session, f"{reason or 'neither podman nor docker is on PATH'}: the image sessions need one")
    raise AssertionError("unreachable")


def base_image(variant: str) -> str:
    """The BASE_IMAGE a build of this variant uses: the CI/user override, else the pinned base."""
    import tomllib

    variant = IMAGES[variant].kind
    override = os.environ.get(f"SLIME_FLASHQLA_BASE_IMAGE_{variant.upper()}")
    return override or tomllib.loads((ROOT / "env" / "versions.toml").read_text())["images"][variant]["base"]


def ensure_base_image(session: nox.Session, engine: str, base: str, variant: str, *pull_flags: str) -> None:
    """Have `base` locally, pulling it if needed; skip (or fail, if required) where it cannot be had."""
    import subprocess

    if subprocess.run([engine, "image", "inspect", base], capture_output=True).returncode == 0:
        return
    session.log(f"{base} is not here: {engine} pull {base}")
    pull = subprocess.Popen([engine, "pull", *pull_flags, base], stderr=subprocess.PIPE, text=True)
    last = ""
    for line in pull.stderr:  # progress goes to stderr; keep its last line for the reason
        print(line, end="", file=sys.stderr)
        last = line.strip() or last
    if pull.wait():
        skip_or_fail(
            session,
            f"base image {base} is not here and cannot be pulled ({last or f'{engine} pull failed'}): "
            f"the image sessions need a registry that serves it, or a local base image named by "
            f"SLIME_FLASHQLA_BASE_IMAGE_{IMAGES[variant].kind.upper()}",
        )


def git(*args: str) -> str:
    """Output of a git command in this checkout, or 'unknown' where git cannot tell."""
    import subprocess

    try:
        done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)
    except FileNotFoundError:  # no git here (a source tree copied into an image)
        return "unknown"
    return done.stdout.strip() if done.returncode == 0 else "unknown"


def source_tree() -> str:
    """git's tree id of the build inputs as they are on disk now (edits and new files included)."""
    import subprocess
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
    import re

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


def image_platform(variant: str) -> str:
    """The os/arch an image is built for, from its [images.<kind>] platform in env/versions.toml."""
    import tomllib

    versions = tomllib.loads((ROOT / "env" / "versions.toml").read_text())
    return versions["images"][IMAGES[variant].kind]["platform"]


def flashqla_support_label(version: str) -> str:
    """What flash-qla `version` runs per GPU, from the runtime's support table (loaded by path: no torch)."""
    import importlib.util

    path = RUNTIME / "slime_flashqla" / "gdn" / "flashqla_support.py"
    spec = importlib.util.spec_from_file_location("_slime_flashqla_support", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module.support_label(version)


def image_build_args(variant: str) -> list[str]:
    """--build-arg flags: pins from env/versions.toml, provenance from git, bases from the env."""
    import tomllib

    versions = tomllib.loads((ROOT / "env" / "versions.toml").read_text())
    project = tomllib.loads((RUNTIME / "pyproject.toml").read_text())["project"]
    args = {
        "VERSION": project["version"],
        "REVISION": git("rev-parse", "HEAD"),
        "FLA_VERSION": versions["packages"]["flash-linear-attention"],
        "FLASH_QLA_VERSION": versions["packages"]["flash-qla"],
        "TILELANG_VERSION": versions["packages"]["tilelang"],
        "FLASHQLA_SUPPORT": flashqla_support_label(versions["packages"]["flash-qla"]),
    }
    if IMAGES[variant].kind == "default":
        args |= {"TORCH_VERSION": versions["torch"]["version"], "TORCH_CUDA_VERSION": versions["torch"]["cuda"]}
    else:
        args["BASE_CUDA_VERSION"] = versions["images"]["gb10"]["cuda"]
    args["BASE_IMAGE"] = base_image(variant)
    flashqla = os.environ.get("SLIME_FLASHQLA_INSTALL_FLASHQLA")
    if flashqla:
        args["INSTALL_FLASHQLA"] = flashqla
    args |= IMAGES[variant].build_args
    return [flag for key, value in args.items() for flag in ("--build-arg", f"{key}={value}")]


def expected_pin_labels(variant: str) -> dict[str, str]:
    """The io.slime-flashqla.pins.* (and flashqla-support) labels an image of this variant must carry."""
    import tomllib

    versions = tomllib.loads((ROOT / "env" / "versions.toml").read_text())
    names = ("flash-linear-attention", "flash-qla", "tilelang")
    labels = {f"io.slime-flashqla.pins.{n}": versions["packages"][n] for n in names}
    labels["io.slime-flashqla.flashqla-support"] = flashqla_support_label(versions["packages"]["flash-qla"])
    if IMAGES[variant].kind == "default":
        labels["io.slime-flashqla.pins.torch"] = versions["torch"]["version"]
        labels["io.slime-flashqla.pins.cuda"] = versions["torch"]["cuda"]
    else:
        labels["io.slime-flashqla.pins.cuda"] = versions["images"]["gb10"]["cuda"]
    return labels


def gpu_run_flags(engine: str) -> list[str]:
    """Flags that hand this host's NVIDIA GPUs to a container; empty where there are none."""
    import shutil
    import subprocess

    if not shutil.which("nvidia-smi") or subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode:
        return []
    # podman reaches GPUs through CDI (nvidia-ctk cdi generate); docker through its nvidia runtime.
    gpus = ["--device", "nvidia.com/gpu=all"] if engine == "podman" else ["--gpus", "all"]
    return [*gpus, "--shm-size", "16g"]


@nox.session(python=False)
@nox.parametrize("variant", list(IMAGES), ids=list(IMAGES))
def image_build(session: nox.Session, variant: str) -> None:
    """Build one image (its Dockerfile under docker/images/); posargs go to build."""
    import subprocess

    BUILT_THIS_RUN[variant] = None  # until the build below succeeds
    engine = container_engine(session)
    dockerfile, tag = IMAGES[variant].dockerfile, IMAGES[variant].tag
    platform = ["--platform", image_platform(variant)]
    ensure_base_image(session, engine, base_image(variant), variant, *platform)
    extra = [*platform]
    if engine == "podman":
        # podman's OCI format drops SHELL (the Dockerfiles need bash); host networking and
        # the host's CA bundle let pip inside the build reach the index as the host does.
        extra += ["--format", "docker", "--network", "host"]
        if HOST_CA.is_file():
            extra += ["-v", f"{HOST_CA}:{HOST_CA}:ro"]
    labels = [flag for key, value in provenance_labels().items() for flag in ("--label", f"{key}={value}")]
    session.run(
        engine, "build", *extra, *image_build_args(variant), *labels, "-f", str(ROOT / dockerfile), "-t", tag,
        *session.posargs, str(ROOT), external=True,
    )  # fmt: skip
    inspect = [engine, "image", "inspect", "--format", "{{.Id}}", tag]
    BUILT_THIS_RUN[variant] = subprocess.run(inspect, capture_output=True, text=True, check=True).stdout.strip()


def image_to_test(session: nox.Session, engine: str, variant: str) -> str:
    """The ID of the image this checkout built; skips (or fails, if required) for any other image."""
    import json
    import subprocess

    tag = IMAGES[variant].tag
    build = f"nox -s 'image_build({variant})'"
    if variant in BUILT_THIS_RUN and BUILT_THIS_RUN[variant] is None:
        skip_or_fail(session, f"image_build({variant}) built no image in this run (its message says why)")
    image = BUILT_THIS_RUN.get(variant) or tag
    fields = "{{.Id}} {{.Os}}/{{.Architecture}} {{json .Config.Labels}}"
    inspect = [engine, "image", "inspect", "--format", fields, image]
    done = subprocess.run(inspect, capture_output=True, text=True)
    if done.returncode:
        skip_or_fail(session, f"image {tag} is not built: run `{build}` first")
    image_id, built_for, labels_json = done.stdout.strip().split(" ", 2)
    if built_for != image_platform(variant):
        session.error(f"{tag} is {built_for}, but env/versions.toml builds it for {image_platform(variant)}")
    session.log(f"{tag}: {built_for}")
    labels = json.loads(labels_json) or {}
    wrong = {k: (labels.get(k), v) for k, v in expected_pin_labels(variant).items() if labels.get(k) != v}
    if wrong:
        session.error(f"{tag}: OCI labels (label, pinned) disagree with env/versions.toml: {wrong}")
    if not labels.get("org.opencontainers.image.created"):
        session.error(f"{tag}: no org.opencontainers.image.created label")
    source = labels.get("org.opencontainers.image.source")
    if source is not None and source_url_of(source) != source:
        session.error(f"{tag}: org.opencontainers.image.source {source!r} is not a network URL without credentials")
    # An image from another commit, or from this commit with other edits, would test other code.
    built_from = (labels.get("org.opencontainers.image.revision"), labels.get("io.slime-flashqla.source-tree"))
    checkout = (git("rev-parse", "HEAD"), source_tree())
    if BUILT_THIS_RUN.get(variant):
        # Built a moment ago from these files: its labels must say so, or the labelling is broken.
        if built_from != checkout:
            session.error(f"{tag} was just built, but its labels {built_from} do not name this checkout {checkout}")
        return image_id
    if "unknown" in checkout:
        skip_or_fail(session, f"git cannot tell this checkout's revision and files, so {tag} cannot be matched to it")
    if built_from != checkout:
        skip_or_fail(
            session,
            f"{tag} was built from revision {built_from[0]} with source tree {built_from[1]}, not from this "
            f"checkout (revision {checkout[0]}, source tree {checkout[1]}): run `{build}` first",
        )
    return image_id


@nox.session(python=False)
@nox.parametrize("variant", list(IMAGES), ids=list(IMAGES))
def image_tests(session: nox.Session, variant: str) -> None:
    """Check the image's labels and platform, run its start-up command, in-image tests, CPU suite, (GPU) gpu_tests."""
    import platform

    engine = container_engine(session)
    image = image_to_test(session, engine, variant)
    gpus = gpu_run_flags(engine)
    built_for = image_platform(variant)  # image_to_test checked that the image is this
    # --platform: the image's own, so podman runs it (under qemu-user if need be) without a warning.
    run = [engine, "run", "--rm", "--platform", built_for, *gpus, image]
    session.run(*run, external=True)  # what `docker run IMAGE` does by itself
    session.run(*run, "uname", "-m", external=True)  # the machine the tests below run on
    session.run(
        *run, "python", "-m", "pytest", "tests/images/shared", f"tests/images/{IMAGES[variant].kind}",
        "-m", "image", "-rs", *session.posargs, external=True,
    )  # fmt: skip
    machine = platform.machine()
    if built_for.split("/")[1] == OCI_ARCH.get(machine, machine):
        session.run(*run, "nox", "--no-venv", "-s", "tests", external=True)
    else:
        session.log(f"{built_for} image on a {machine} host (qemu-user): CPU suite of {', '.join(EMULATED_SUITE)} only")
        suite = ["python", "-m", "pytest", *EMULATED_SUITE, "-m", EMULATED_MARKERS, "-rs", *session.posargs]
        session.run(*run, *suite, external=True)
    if gpus:
        session.run(*run, "nox", "--no-venv", "-s", "gpu_tests", external=True)
    else:
        session.log("no GPU on this host: gpu_tests not run in the image")


@nox.session
def hadolint(session: nox.Session) -> None:
    """hadolint over the Dockerfiles and CI's stand-in Containerfiles (config: .hadolint.yaml)."""
    session.install("-r", str(ROOT / "env" / "hadolint.txt"))
    dockerfiles = dict.fromkeys(ROOT / image.dockerfile for image in IMAGES.values())
    files = [*dockerfiles, *sorted((ROOT / "docker" / "ci").glob("Containerfile.*"))]
    session.run("hadolint", "--config", str(ROOT / ".hadolint.yaml"), *map(str, files))
