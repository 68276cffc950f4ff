"""Patch what torch reports about the machine (versions, CUDA, capability) for validation tests.

Only torch's own reporting functions are replaced; the validation code under test runs as is.
`flashqla=` puts a stand-in flash-qla of that version on sys.path (helpers.flashqla_stand_in).
"""

from __future__ import annotations

import pytest
import torch

from helpers.flashqla_stand_in import install_stand_in_flashqla


@pytest.fixture
def machine(monkeypatch, tmp_path):
    """Call machine(torch=..., cuda=..., available=..., capability=..., flashqla=...) to describe a node."""

    def describe(*, torch_version="2.8.0+cu128", cuda="12.8", available=True, capability=(9, 0), flashqla=None):
        monkeypatch.setattr(torch, "__version__", torch_version)
        monkeypatch.setattr(torch.version, "cuda", cuda)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: available)
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
        if flashqla is not None:
            install_stand_in_flashqla(tmp_path / "site", flashqla)
            monkeypatch.syspath_prepend(str(tmp_path / "site"))

    return describe
