"""Patch what torch reports about the machine (versions, CUDA, capability) for validation tests.

Only torch's own reporting functions are replaced; the validation code under test runs as is.
"""

from __future__ import annotations

import pytest
import torch


@pytest.fixture
def machine(monkeypatch):
    """Call machine(torch=..., cuda=..., available=..., capability=...) to describe a node."""

    def describe(*, torch_version="2.8.0+cu128", cuda="12.8", available=True, capability=(9, 0)):
        monkeypatch.setattr(torch, "__version__", torch_version)
        monkeypatch.setattr(torch.version, "cuda", cuda)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: available)
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)

    return describe
