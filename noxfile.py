"""Sessions: `nox` runs the default set (what CI runs); `nox -s gpu_tests` checks a GPU node.

Environment knobs:
  SLIME_FLASHQLA_TORCH          pip requirement for torch in the `tests` venv (CI sets one); unset:
                                the newest CPU build, from PyTorch's CPU index (PyPI's torch of the
                                same version, with its CUDA wheels, where that index cannot be reached).
  SLIME_FLASHQLA_ALLOW_NO_GPU=1 `gpu_tests` skips, instead of failing, where no GPU is visible.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent
RUNTIME = ROOT / "runtime"
DEV_TOOLS = ROOT / "env" / "dev-tools.txt"
LINT_TOOLS = ROOT / "env" / "lint.txt"
# The CPU suite needs no CUDA: PyPI's Linux torch brings 4 GB of CUDA wheels, this index's `+cpu`
# build (which pip prefers over PyPI's of the same version) about 200 MB.
CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"


def _load_images_module():
    """docker/images.py by path: docker/ is no package (`images` and `docker` are taken in tests/)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("slime_flashqla_images", ROOT / "docker" / "images.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


images = _load_images_module()

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
    else:
        # An extra index, not the only one: where it cannot be reached, PyPI's torch still installs.
        session.install("--extra-index-url", CPU_TORCH_INDEX, "torch")
    extra = f"[{','.join(extras)}]" if extras else ""
    session.install("-r", str(DEV_TOOLS), "-e", f"{RUNTIME}{extra}")


def install_fla_floor(session: nox.Session) -> dict[str, str]:
    """Install the lowest supported FLA (env/versions.toml [floor]) into a folder of its own; env for pytest."""
    floor = images.load_versions()["floor"]
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
        # The package's run requirements include __cuda; a build host without a GPU
        # driver needs the override to install it for the recipe's tests.
        env["CONDA_OVERRIDE_CUDA"] = images.load_versions()["torch"]["cuda"]
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


# ---- Container images: build each image of docker/images/, then run the tests inside it ----
# What an image is, and how it is built, labelled and matched to this checkout, is docker/images.py
# (its docstring lists the SLIME_FLASHQLA_* knobs); the sessions below only turn its answers into
# nox's. Without an engine, or without the base image (no registry that serves it), they skip,
# saying why: the machine, not the project, lacks something.


IMAGES = images.load_images()
# variant -> image ID that image_build built in this nox run (None: it ran and built nothing).
BUILT_THIS_RUN: dict[str, str | None] = {}


def skip_or_fail(session: nox.Session, reason: str) -> None:
    """Skip the session for a reason of the machine's; fail instead where CI requires the images."""
    if os.environ.get("SLIME_FLASHQLA_REQUIRE_IMAGES") == "1":
        session.error(f"{reason} (SLIME_FLASHQLA_REQUIRE_IMAGES=1 requires the image sessions to run)")
    session.skip(reason)


def image_step(session: nox.Session, step, *args):
    """Run one step of docker/images.py: what the machine lacks skips (or fails), what is wrong fails."""
    try:
        return step(*args)
    except images.ImageUnavailable as reason:
        skip_or_fail(session, str(reason))
    except images.ImageError as wrong:
        session.error(str(wrong))
    raise AssertionError("unreachable")


@nox.session(python=False)
@nox.parametrize("variant", list(IMAGES), ids=list(IMAGES))
def image_build(session: nox.Session, variant: str) -> None:
    """Build one image (its Dockerfile under docker/images/); posargs go to build."""
    BUILT_THIS_RUN[variant] = None  # until the build below succeeds
    image = IMAGES[variant]
    engine = image_step(session, images.container_engine)
    image_step(
        session, images.ensure_base_image, engine, image, session.log, "--platform", images.image_platform(image)
    )
    session.run(*image_step(session, images.build_command, engine, image, session.posargs), external=True)
    BUILT_THIS_RUN[variant] = images.image_id(engine, image.tag)


@nox.session(python=False)
@nox.parametrize("variant", list(IMAGES), ids=list(IMAGES))
def image_tests(session: nox.Session, variant: str) -> None:
    """Check the image's labels and platform, run its start-up command, in-image tests, CPU suite, (GPU) gpu_tests."""
    import platform

    image = IMAGES[variant]
    engine = image_step(session, images.container_engine)
    image_id = image_step(session, images.image_to_test, engine, image, BUILT_THIS_RUN, session.log)
    gpus = images.gpu_run_flags(engine)
    built_for = images.image_platform(image)  # image_to_test checked that the image is this
    # --platform: the image's own, so podman runs it (under qemu-user if need be) without a warning.
    run = [engine, "run", "--rm", "--platform", built_for, *gpus, image_id]
    session.run(*run, external=True)  # what `docker run IMAGE` does by itself
    session.run(*run, "uname", "-m", external=True)  # the machine the tests below run on
    session.run(
        *run, "python", "-m", "pytest", *images.in_image_test_dirs(image), "-m", "image", "-rs", *session.posargs,
        external=True,
    )  # fmt: skip
    machine = platform.machine()
    if images.runs_natively(image, machine):
        session.run(*run, "nox", "--no-venv", "-s", "tests", external=True)
    else:
        suite = images.EMULATED_SUITE
        session.log(f"{built_for} image on a {machine} host (qemu-user): CPU suite of {', '.join(suite)} only")
        pytest = ["python", "-m", "pytest", *suite, "-m", images.EMULATED_MARKERS, "-rs", *session.posargs]
        session.run(*run, *pytest, external=True)
    if gpus:
        session.run(*run, "nox", "--no-venv", "-s", "gpu_tests", external=True)
    else:
        session.log("no GPU on this host: gpu_tests not run in the image")


@nox.session
def hadolint(session: nox.Session) -> None:
    """hadolint over the Dockerfiles and CI's stand-in Containerfiles (config: .hadolint.yaml)."""
    session.install("-r", str(ROOT / "env" / "hadolint.txt"))
    files = [*images.dockerfiles(), *sorted((ROOT / "docker" / "ci").glob("Containerfile.*"))]
    session.run("hadolint", "--config", str(ROOT / ".hadolint.yaml"), *map(str, files))
