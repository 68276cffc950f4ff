"""Where TileLang (and Triton) keep compiled kernels.

TileLang reads TILELANG_CACHE_DIR once, when it is imported, so the directory must be
chosen before anything imports tilelang (or flash_qla, which imports it).
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "TILELANG_CACHE_DIR"
DEFAULT_CACHE_DIR = Path("~/.tilelang/cache")  # TileLang's own default


def tilelang_cache_dir() -> Path:
    """The TileLang kernel cache directory in effect for this process."""
    return Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE_DIR).expanduser()


TRITON_CACHE_ENV = "TRITON_CACHE_DIR"
TRITON_HOME_ENV = "TRITON_HOME"


def triton_cache_dir() -> Path:
    """The Triton kernel cache directory in effect for this process (Triton's own rule: $TRITON_HOME/.triton/cache)."""
    if os.environ.get(TRITON_CACHE_ENV):
        return Path(os.environ[TRITON_CACHE_ENV]).expanduser()
    return Path(os.environ.get(TRITON_HOME_ENV) or "~").expanduser() / ".triton" / "cache"
