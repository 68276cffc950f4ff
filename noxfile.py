"""Sessions: `nox` runs the default set (what CI runs); `nox -s gpu_tests` checks a GPU node.

Environment knobs:
  SLIME_FLASHQLA_TORCH   pip requirement for torch in the `tests` venv (default:
                         whatever `torch>=2.8` resolves to; CI sets a CPU build).
"""

from __future__ import annotations

import os
from pathlib import Path

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


@nox.session
def tests(session: nox.Session) -> None:
    """CPU test suite: unit tests, real gloo processes, CLI; GPU and image tests excluded."""
    install_runtime(session, "cli")
    session.run(
        "python",
        "-m",
        "pytest",
        str(ROOT / "tests"),
        "-m",
        "not gpu and not image",
        *session.posargs,
    )


@nox.session(python=False)
def gpu_tests(session: nox.Session) -> None:
    """Parity and behaviour tests on this node's GPU, in the current environment."""
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
#   SLIME_FLASHQLA_BASE_IMAGE_DEFAULT    BASE_IMAGE for docker/Dockerfile (CI: its stand-in base)
#   SLIME_FLASHQLA_BASE_IMAGE_GB10       BASE_IMAGE for docker/Dockerfile.gb10 (CI: its stand-in base)
#   SLIME_FLASHQLA_INSTALL_FLASHQLA      INSTALL_FLASHQLA build argument (0 or 1)
#   SLIME_FLASHQLA_REQUIRE_IMAGES=1      fail, instead of skipping, where no engine can be used
IMAGES = {
    "default": ("docker/Dockerfile", "slime-flashqla:latest"),
    "gb10": ("docker/Dockerfile.gb10", "slime-flashqla:gb10"),
}
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")


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
    reason = reason or "neither podman nor docker is on PATH"
    if os.environ.get("SLIME_FLASHQLA_REQUIRE_IMAGES") == "1":
        session.error(f"{reason}, and SLIME_FLASHQLA_REQUIRE_IMAGES=1 requires the image sessions to run")
    session.skip(f"{reason}: the image sessions need one (CI installs podman in .ci/setup.d)")
    raise AssertionError("unreachable")


def image_build_args(variant: str) -> list[str]:
    """--build-arg flags: pins from env/versions.toml, provenance from git, bases from the env."""
    import subprocess
    import tomllib

    versions = tomllib.loads((ROOT / "env" / "versions.toml").read_text())
    project = tomllib.loads((RUNTIME / "pyproject.toml").read_text())["project"]

    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else "unknown"

    args = {
        "VERSION": project["version"],
        "REVISION": git("rev-parse", "HEAD"),
        "SOURCE": git("remote", "get-url", "origin"),
        "FLA_VERSION": versions["packages"]["flash-linear-attention"],
        "FLASH_QLA_VERSION": versions["packages"]["flash-qla"],
        "TILELANG_VERSION": versions["packages"]["tilelang"],
    }
    if variant == "default":
        args |= {"TORCH_VERSION": versions["torch"]["version"], "TORCH_CUDA_VERSION": versions["torch"]["cuda"]}
    else:
        args["BASE_CUDA_VERSION"] = versions["images"]["gb10"]["cuda"]
    base = os.environ.get(f"SLIME_FLASHQLA_BASE_IMAGE_{variant.upper()}")
    if base:
        args["BASE_IMAGE"] = base
    flashqla = os.environ.get("SLIME_FLASHQLA_INSTALL_FLASHQLA")
    if flashqla:
        args["INSTALL_FLASHQLA"] = flashqla
    return [flag for key, value in args.items() for flag in ("--build-arg", f"{key}={value}")]


def expected_pin_labels(variant: str) -> dict[str, str]:
    """The io.slime-flashqla.pins.* labels an image of this variant must carry."""
    import tomllib

    versions = tomllib.loads((ROOT / "env" / "versions.toml").read_text())
    names = ("flash-linear-attention", "flash-qla", "tilelang")
    labels = {f"io.slime-flashqla.pins.{n}": versions["packages"][n] for n in names}
    if variant == "default":
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
    """Build one image (default: docker/Dockerfile, gb10: docker/Dockerfile.gb10); posargs go to build."""
    engine = container_engine(session)
    dockerfile, tag = IMAGES[variant]
    extra = []
    if engine == "podman":
        # podman's OCI format drops SHELL (the Dockerfiles need bash); host networking and
        # the host's CA bundle let pip inside the build reach the index as the host does.
        extra = ["--format", "docker", "--network", "host"]
        if HOST_CA.is_file():
            extra += ["-v", f"{HOST_CA}:{HOST_CA}:ro"]
    session.run(
        engine, "build", *extra, *image_build_args(variant), "-f", str(ROOT / dockerfile), "-t", tag,
        *session.posargs, str(ROOT), external=True,
    )  # fmt: skip


@nox.session(python=False)
@nox.parametrize("variant", list(IMAGES), ids=list(IMAGES))
def image_tests(session: nox.Session, variant: str) -> None:
    """Check the image's pin labels, run its start-up command, in-image tests, CPU suite, (GPU) gpu_tests."""
    import json
    import subprocess

    engine = container_engine(session)
    tag = IMAGES[variant][1]
    if subprocess.run([engine, "image", "inspect", tag], capture_output=True).returncode:
        session.error(f"image {tag} is not built: run `nox -s 'image_build({variant})'` first")
    inspect = [engine, "image", "inspect", "--format", "{{json .Config.Labels}}", tag]
    labels = json.loads(subprocess.run(inspect, capture_output=True, text=True, check=True).stdout)
    wrong = {k: (labels.get(k), v) for k, v in expected_pin_labels(variant).items() if labels.get(k) != v}
    if wrong:
        session.error(f"{tag}: OCI labels (label, pinned) disagree with env/versions.toml: {wrong}")
    gpus = gpu_run_flags(engine)
    run = [engine, "run", "--rm", *gpus, tag]
    session.run(*run, external=True)  # what `docker run IMAGE` does by itself
    session.run(
        *run, "python", "-m", "pytest", "tests/images/shared", f"tests/images/{variant}",
        "-m", "image", "-rs", *session.posargs, external=True,
    )  # fmt: skip
    session.run(*run, "nox", "--no-venv", "-s", "tests", external=True)
    if gpus:
        session.run(*run, "nox", "--no-venv", "-s", "gpu_tests", external=True)
    else:
        session.log("no GPU on this host: gpu_tests not run in the image")


@nox.session
def hadolint(session: nox.Session) -> None:
    """hadolint over the Dockerfiles and CI's stand-in Containerfiles (config: .hadolint.yaml)."""
    session.install("-r", str(ROOT / "env" / "hadolint.txt"))
    files = [ROOT / d for d, _ in IMAGES.values()] + sorted((ROOT / "docker" / "ci").glob("Containerfile.*"))
    session.run("hadolint", "--config", str(ROOT / ".hadolint.yaml"), *map(str, files))
