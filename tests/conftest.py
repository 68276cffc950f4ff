"""Test-suite wide settings: GPU tests skip cleanly on machines without CUDA; Triton kernels run interpreted there."""

from __future__ import annotations

import pytest

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
