"""Reporting shared by the benchmarks: markdown tables, rates and ratios, the command line, the machine."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path


def rate(value: float | None) -> str:
    """A per-second rate with a k/M/G suffix."""
    if value is None:
        return "-"
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:.2f}{suffix}"
    return f"{value:.1f}"


def ratio(value: float | None) -> str:
    """A ratio as `1.23x`."""
    return "-" if value is None else f"{value:.2f}x"


def markdown_table(headers, cells) -> list[str]:
    """A markdown table as lines."""

    def line(items):
        return "| " + " | ".join(str(x).replace("|", "\\|") for x in items) + " |"

    return [line(headers), "|" + "|".join("---" for _ in headers) + "|", *(line(c) for c in cells)]


ENV_VARS = ("CUDA_VISIBLE_DEVICES", "FLA_FLASH_QLA", "FLA_DISABLE_BACKEND_DISPATCH")


def command_line(module: str) -> str:
    """This process's command line, with `python -m <module>` for a `-m` run of `module`."""
    argv = list(sys.argv)
    parts = tuple(module.split(".")[-2:])
    if argv and Path(argv[0]).parts[-2:] == (parts[0], parts[1] + ".py"):  # `-m` puts the file in argv[0]
        return shlex.join(["python", "-m", module, *argv[1:]])
    return shlex.join(argv)


def environment(device, module: str) -> dict:
    """GPU, versions, date and the exact command line of this run."""
    import datetime
    import platform

    import torch

    from slime_flashqla import __version__
    from slime_flashqla.host.packages import kernel_package_versions

    cuda = device.type == "cuda"
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": command_line(module),
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "platform": platform.platform(),
        "device": str(device),
        "gpu": torch.cuda.get_device_name(device) if cuda else None,
        "capability": ".".join(map(str, torch.cuda.get_device_capability(device))) if cuda else None,
        "cpu": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "packages": kernel_package_versions(),
        "slime_flashqla": __version__,
        "env": {name: os.environ[name] for name in ENV_VARS if name in os.environ},
    }
