"""Patch what torch reports about the machine (versions, CUDA, capability) for validation tests.

Only torch's own reporting functions are replaced; the validation code under test runs as is.
`flashqla=` installs a stand-in flash-qla distribution of that version (real files on sys.path:
a dist-info for importlib.metadata and a `flash_qla` package that raises if anything imports it).
"""

from __future__ import annotations

import pytest
import torch

NEVER_IMPORTED = "the stand-in for flash-qla {version} was imported: validation must refuse before any import"


def install_stand_in_flashqla(root, version: str) -> None:
    """Write a flash-qla `version` distribution under `root` (a sys.path entry) whose import raises."""
    package = root / "flash_qla"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(f"raise ImportError({NEVER_IMPORTED.format(version=version)!r})\n")
    info = root / f"flash_qla-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: flash-qla\nVersion: {version}\n")


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
