"""Test-suite wide settings: GPU tests skip cleanly on machines without CUDA; Triton kernels run interpreted there."""

from __future__ import annotations

import pytest

from helpers.slime_source import SHARED_COPY, slime_source_dir
from helpers.triton_interpreter import use_interpreter_without_gpu

use_interpreter_without_gpu()


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
