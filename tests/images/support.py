"""Helpers of the in-image tests: the source tree in the image and ways to run commands there."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def entrypoint(*command: str, **env: str) -> subprocess.CompletedProcess:
    """Run the image's entrypoint script with a command, as `docker run IMAGE command` does."""
    return subprocess.run(
        ["/usr/local/bin/slime-flashqla-entrypoint", *command],
        capture_output=True, text=True, env={**os.environ, **env}, timeout=240,
    )  # fmt: skip


def python_snippet(code: str) -> subprocess.CompletedProcess:
    """Run Python code in a fresh interpreter (imports of kernel packages stay out of pytest's)."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240)


def wheel_tags(dist: importlib.metadata.Distribution) -> list[str]:
    """The Tag lines of a distribution's WHEEL file (how it was built and for what)."""
    return [line.split(": ", 1)[1] for line in (dist.read_text("WHEEL") or "").splitlines() if line.startswith("Tag: ")]
