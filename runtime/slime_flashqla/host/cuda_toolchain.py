"""The CUDA compiler TileLang compiles with, found by TileLang's own rule without importing tilelang.

TileLang (tilelang/env.py `_find_cuda_home`, 0.1.x) settles CUDA_HOME once, when it is imported:
$CUDA_HOME, else $CUDA_PATH, else the directory above the `bin/` of the `nvcc` on PATH (the NVIDIA
HPC SDK's one level higher), else the pip package nvidia-cuda-nvcc, else /usr/local/cuda, else
/opt/nvidia/hpc_sdk/Linux_x86_64; it then runs `<CUDA_HOME>/bin/nvcc`
(tilelang/contrib/nvcc.py `get_nvcc_compiler`). Importing tilelang to ask it would cost seconds
and load its TVM runtime, so the rule is followed here on its own.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
from pathlib import Path

from slime_flashqla.host.packages import distribution_version

_RELEASE = re.compile(r"release [\d.]+, V(\d+(?:\.\d+)+)")
_DEFAULT_HOMES = ("/usr/local/cuda", "/opt/nvidia/hpc_sdk/Linux_x86_64")


def _pip_nvcc_home() -> str | None:
    try:
        files = importlib.metadata.files("nvidia-cuda-nvcc") or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for file in files:
        if file.name == "nvcc":
            return str(Path(file.locate()).parent.parent)
    return None


def tilelang_cuda_home() -> str | None:
    """The CUDA_HOME TileLang settles on in this environment, or None where it finds none."""
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home is None:
        nvcc = shutil.which("nvcc")
        if nvcc is not None:
            levels = 3 if "hpc_sdk" in nvcc.lower() and "cuda" not in nvcc.lower() else 2
            home = str(Path(nvcc).parents[levels - 1])
        else:
            home = _pip_nvcc_home() or next((path for path in _DEFAULT_HOMES if os.path.exists(path)), None)
    return home if home and os.path.exists(home) else None


def nvcc_version(cuda_home: str) -> str | None:
    """The full version of `<cuda_home>/bin/nvcc` (e.g. "12.8.93"), or None where it does not run."""
    nvcc = Path(cuda_home) / "bin" / "nvcc"
    try:
        out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    found = _RELEASE.search(out)
    return found.group(1) if found else None


def tilelang_nvcc_version() -> str | None:
    """The version of the nvcc TileLang would compile with here; None without tilelang or without an nvcc."""
    if distribution_version("tilelang") is None:
        return None  # no TileLang here, so no compiler of its to record
    home = tilelang_cuda_home()
    return nvcc_version(home) if home else None


def same_release(a: str, b: str) -> bool:
    """Whether two nvcc versions are the same CUDA release (major.minor): what TileLang's kernels depend on."""
    return a.split(".")[:2] == b.split(".")[:2]
