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
nox.options.sessions = ["lint", "tests"]
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
