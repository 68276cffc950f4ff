"""Where TileLang keeps FlashQLA's compiled kernels.

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
