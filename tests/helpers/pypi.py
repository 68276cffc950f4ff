"""pip against PyPI for the `network` tests: the pip of env/pip.txt, this machine's pip settings left out.

A machine's own pip configuration (find-links folders, extra indexes, global constraints) would change
what resolves; only what reaching PyPI needs (certificates, proxy, index URL, timeout) is kept.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PIP_PIN = next(line.strip() for line in (ROOT / "env" / "pip.txt").read_text().splitlines() if line.startswith("pip=="))
KEPT = {"PIP_CERT", "PIP_CLIENT_CERT", "PIP_INDEX_URL", "PIP_TRUSTED_HOST", "PIP_PROXY"}
# Fail fast where PyPI is out of reach instead of pip's minutes of retries.
NETWORK_FLAGS = ["--timeout", "30", "--retries", "2"]


class PyPIUnreachable(Exception):
    """The pinned pip could not be fetched from PyPI: the machine has no route to it."""


def pip_environment() -> dict[str, str]:
    """os.environ without this machine's pip settings, except what reaching PyPI needs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") or k in KEPT}
    return env | {"PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}


def fetch_pinned_pip(folder: Path) -> list[str]:
    """The command that runs env/pip.txt's pip from its wheel (fetched into `folder`), or PyPIUnreachable."""
    done = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", *NETWORK_FLAGS, PIP_PIN, "-d", str(folder)],
        env=pip_environment(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    wheels = sorted(folder.glob("pip-*.whl"))
    if done.returncode or not wheels:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise PyPIUnreachable(f"PyPI cannot be reached to fetch {PIP_PIN}: {last}")
    # pip runs from its own wheel (a zip on sys.path); nothing is installed.
    return [sys.executable, str(wheels[0] / "pip")]


def run_pip(pip: list[str], *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    """Run the pinned pip with the network flags and the cleaned environment."""
    return subprocess.run(
        [*pip, *args, *NETWORK_FLAGS], env=pip_environment(), capture_output=True, text=True, timeout=timeout
    )
