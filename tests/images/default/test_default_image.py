"""The default (x86_64, Hopper) image: the hashed lock installed exactly, CUDA 12.8 throughout."""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from images.support import ROOT, python_snippet

pytestmark = pytest.mark.image


def lock_entries() -> dict[str, str]:
    """name -> version of the lock this image was built from (its python's)."""
    sys.path.insert(0, str(ROOT / "env"))
    try:
        from render import lock_paths, locked_versions
    finally:
        sys.path.pop(0)
    main, flashqla = lock_paths(f"{sys.version_info[0]}.{sys.version_info[1]}")
    entries = locked_versions(main.read_text())
    if os.environ["SLIME_FLASHQLA_INSTALL_FLASHQLA"] == "1":
        entries |= locked_versions(flashqla.read_text())
    return entries


def test_torch_is_the_pinned_cuda_build(pins):
    import torch

    assert torch.__version__.split("+")[0] == pins["torch"]["version"]
    assert torch.version.cuda == pins["torch"]["cuda"]


def test_every_locked_package_is_installed_at_its_locked_version():
    entries = lock_entries()
    assert len(entries) > 50  # the whole resolution, not a handful of top-level pins
    wrong = {}
    for name, version in entries.items():
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            installed = None
        if installed != version:
            wrong[name] = (installed, version)
    assert not wrong, f"installed vs locked: {wrong}"


def test_tilelang_is_present_even_without_flashqla(pins):
    # torch 2.8's Triton 3.4.0 gets FLA's GDN backward wrong on Hopper without TileLang.
    assert importlib.metadata.version("tilelang") == pins["packages"]["tilelang"]
    assert importlib.metadata.version("triton") == "3.4.0"


def test_kernel_packages_import_without_a_gpu():
    done = python_snippet("import torch, fla, tilelang; print(torch.__version__)")
    assert done.returncode == 0, done.stderr


def toolkit_release(tool: Path) -> str:
    """The `release X.Y` a CUDA tool reports."""
    out = subprocess.run([str(tool), "--version"], capture_output=True, text=True, check=True).stdout
    match = re.search(r"release (\d+\.\d+)", out)
    assert match, out
    return match.group(1)


def test_cuda_toolkit_matches_torch_cuda(pins):
    cuda_home = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))
    # ptxas is in both the -devel base and CI's stand-in (NVIDIA's cu12 nvcc wheel ships
    # ptxas, headers and libdevice but no nvcc driver); nvcc is checked wherever it exists.
    assert toolkit_release(cuda_home / "bin" / "ptxas") == pins["torch"]["cuda"]
    assert (cuda_home / "include" / "cuda_runtime.h").is_file()
    nvcc = cuda_home / "bin" / "nvcc"
    if nvcc.exists():
        assert toolkit_release(nvcc) == pins["torch"]["cuda"]
