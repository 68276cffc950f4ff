"""The test suite compiles into temporary kernel caches, never into the user's (~/.triton/cache, ~/.tilelang/cache).

A later `slime-flashqla cache export` on the same machine would otherwise pack the suite's kernels (issue 35 item 12).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _where_the_suite_redirects():
    """The suite redirects the caches on a CPU machine outside an image (tests/conftest.py says why not elsewhere)."""
    from helpers.triton_interpreter import ON_GPU

    if ON_GPU or os.environ.get("SLIME_FLASHQLA_IMAGE"):
        pytest.skip("the suite keeps the environment's kernel caches here: a GPU node, or inside an image")


def outside_home(path) -> bool:
    path = Path(path).resolve()
    return Path(tempfile.gettempdir()).resolve() in path.parents and Path.home().resolve() not in path.parents


def test_triton_puts_this_session_s_kernels_in_a_temporary_cache():
    cache = pytest.importorskip("triton.runtime.cache")
    manager = cache.get_cache_manager("0" * 64)  # Triton's own choice of where a compiled kernel goes
    assert outside_home(manager.cache_dir), manager.cache_dir


def test_a_command_the_suite_starts_uses_the_temporary_caches_too():
    code = (
        "from slime_flashqla.kernels.cache import tilelang_cache_dir, triton_cache_dir; "
        "print(tilelang_cache_dir()); print(triton_cache_dir())"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    tilelang, triton = done.stdout.splitlines()
    assert outside_home(tilelang) and outside_home(triton) and tilelang != triton, done.stdout
    assert os.environ.get("TRITON_HOME") and outside_home(os.environ["TRITON_HOME"])
