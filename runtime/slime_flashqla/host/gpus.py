"""The node's NVIDIA driver and visible GPUs, for the doctor report, the archive's stack and the preload's record."""

from __future__ import annotations

import shutil
import subprocess


def nvidia_smi_driver() -> str | None:
    """The driver version nvidia-smi reports (e.g. "580.159.04"), or None where it cannot tell."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    return lines[0] if lines else None


def driver_cuda() -> str | None:
    """The CUDA version the installed driver supports (e.g. "12.8"), or None."""
    import torch

    try:
        value = int(torch._C._cuda_getDriverVersion())
    except (AttributeError, RuntimeError):
        return None
    return f"{value // 1000}.{(value % 1000) // 10}" if value > 0 else None


def gpus() -> list[dict]:
    """Every visible CUDA device: index, name and compute capability ("9.0")."""
    import torch

    if not torch.cuda.is_available():
        return []
    found = []
    for index in range(torch.cuda.device_count()):
        major, minor = torch.cuda.get_device_capability(index)
        found.append({"index": index, "name": torch.cuda.get_device_name(index), "capability": f"{major}.{minor}"})
    return found


def gpu_archs_and_names() -> tuple[str, str]:
    """("sm_90" or "sm_80,sm_90", "NVIDIA H200, ..."), or ("none", "none") where torch sees no CUDA device."""
    devices = gpus()
    if not devices:
        return "none", "none"
    archs = {"sm_" + device["capability"].replace(".", "") for device in devices}
    names = dict.fromkeys(device["name"] for device in devices)  # first-seen order, each name once
    return ",".join(sorted(archs)), ", ".join(names)
