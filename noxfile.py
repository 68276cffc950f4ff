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
        session.install("-r", str(DEV_TOOLS))
    session.run("ruff", "check", str(ROOT))
    session.run("ruff", "format", "--check", str(ROOT))
