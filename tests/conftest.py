"""Test-suite wide settings: GPU tests skip cleanly on machines without CUDA; Triton kernels run interpreted there.

The CPU suite compiles (e.g. tests/runtime/triton_ops/test_sm90_compile.py) into temporary kernel caches, never into
the user's ~/.triton/cache or ~/.tilelang/cache, where a later `slime-flashqla cache export` would pack the
suite's kernels; the commands the tests start inherit them. On a GPU, and inside an image (whose tests
check the image's cache volume), the caches stay as the environment sets them.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from helpers.slime_source import SHARED_COPY, slime_source_dir
from helpers.triton_interpreter import ON_GPU, use_interpreter_without_gpu


def _temporary_kernel_caches() -> Path | None:
    """Point Triton and TileLang at a new temporary folder (before either writes a kernel); None where left alone."""
    if ON_GPU or os.environ.get("SLIME_FLASHQLA_IMAGE"):
        return None
    root = Path(tempfile.mkdtemp(prefix="slime-flashqla-test-caches-"))
    # TRITON_HOME too: Triton's dump and override folders default to ~/.triton as well.
    for variable, folder in (("TRITON_HOME", "triton-home"), ("TRITON_CACHE_DIR", "triton"),
                             ("TILELANG_CACHE_DIR", "tilelang")):  # fmt: skip
        os.environ[variable] = str(root / folder)
    return root


KERNEL_CACHES = _temporary_kernel_caches()
use_interpreter_without_gpu()


def pytest_unconfigure(config):
    if KERNEL_CACHES is not None:
        shutil.rmtree(KERNEL_CACHES, ignore_errors=True)


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def slime_source():
    """slime's real source (a checkout directory), or a skip saying where it was looked for."""
    source = slime_source_dir()
    if source is None:
        pytest.skip(f"slime's source is not here: set SLIME_SOURCE to a slime checkout (looked for {SHARED_COPY})")
    return source
