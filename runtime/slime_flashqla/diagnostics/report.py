"""The node report behind `slime-flashqla doctor`: versions, GPU, backends, FlashQLA, warnings and notes."""

from __future__ import annotations

import platform
import sys

from packaging.version import InvalidVersion, Version

from slime_flashqla.diagnostics.node import driver_cuda, gpus, nvidia_smi_driver
from slime_flashqla.gdn.fla_kernels import hopper_backward_problem
from slime_flashqla.gdn.packages import PIP_PACKAGES, installed_version, is_installed


def _version(text: str | None) -> Version | None:
    try:
        return Version(text) if text else None
    except InvalidVersion:
        return None


def known_problems(report: dict) -> list[str]:
    """Warnings for known-bad combinations in a doctor report."""
    warnings = []
    packages = report["packages"]
    if any(gpu["capability"] == "9.0" for gpu in report["gpus"]):
        # The rule the `fla` backend refuses training by, read from this report's versions.
        problem = hopper_backward_problem(
            packages.get("fla"), packages.get("triton"), (9, 0), tilelang=bool(packages.get("tilelang"))
        )
        warnings += [problem] if problem else []
    supported, torch_cuda = _version(report["driver_cuda"]), _version(report["torch_cuda"])
    if supported and torch_cuda and supported.release[:2] < torch_cuda.release[:2]:
        warnings.append(
            f"the NVIDIA driver supports CUDA {report['driver_cuda']} but PyTorch is built for CUDA "
            f"{report['torch_cuda']}: upgrade the driver (CUDA 12.8 needs driver >= 570)"
        )
    return warnings


def report_notes(report: dict) -> list[str]:
    """Facts of this environment worth knowing that ask nothing of the user (unlike `known_problems`)."""
    notes = []
    if report["fla_forwards_to_flashqla"]:
        # What `pip install ./runtime[flashqla]` itself sets up (FLA 0.6 with flash-qla): no fix is wanted.
        notes.append(
            "FLA's public chunk_gated_delta_rule forwards to FlashQLA in this environment (FLA >= 0.6 with "
            "flash_qla installed; FLA_FLASH_QLA=0 turns it off): code calling FLA directly may not run FLA's "
            "kernels. slime-flashqla's 'fla' backend bypasses the forwarding."
        )
    return notes


def collect_report() -> dict:
    """Everything `doctor` reports, as plain JSON-ready data (imports no kernel package)."""
    import torch

    from slime_flashqla import __version__
    from slime_flashqla.gdn.api import explain_auto
    from slime_flashqla.gdn.backends import KERNEL_BACKENDS
    from slime_flashqla.gdn.fla_kernels import fla_forwards_to_flashqla
    from slime_flashqla.gdn.flashqla_support import support_line
    from slime_flashqla.gdn.validation import flashqla_runtime_status
    from slime_flashqla.integrations.slime.report import slime_report
    from slime_flashqla.kernels.cache import tilelang_cache_dir

    cuda = torch.cuda.is_available()
    flashqla = KERNEL_BACKENDS["flashqla"]
    flashqla_ok, flashqla_reason = flashqla.available(None, backward=True)
    inference_ok, _ = flashqla.available(None, backward=False)
    backends = {}
    for name, backend in KERNEL_BACKENDS.items():
        ok, reason = backend.available(None)
        backends[name] = {"available": ok, "reason": reason}
    choice = explain_auto()
    report = {
        "slime_flashqla": __version__,
        "python": platform.python_version(),
        "platform": f"{sys.platform}-{platform.machine()}",
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cuda_available": cuda,
        "driver": nvidia_smi_driver() if cuda else None,
        "driver_cuda": driver_cuda() if cuda else None,
        "gpus": gpus(),
        "packages": {module: installed_version(module) for module in PIP_PACKAGES},
        "backends": backends,
        "flashqla": {
            "ok": flashqla_ok,
            "reason": flashqla_reason,
            "forward_only": flashqla_runtime_status(None, backward=True).forward_only,
            "inference_ok": inference_ok,
            "support": support_line(installed_version("flash_qla")),
        },
        "fla_kernel": _fla_kernel(backends["fla"]["available"]),
        "auto": {"backend": choice.backend, "reason": choice.reason, "for": "bf16 training, K=V=128"},
        "fla_forwards_to_flashqla": fla_forwards_to_flashqla(),
        "tilelang_cache_dir": str(tilelang_cache_dir()),
    }
    report["slime"] = slime_report()
    report["warnings"] = known_problems(report)
    report["notes"] = report_notes(report)
    return report


def _fla_kernel(fla_usable: bool) -> str:
    """What the `fla` backend runs here, in agreement with its availability."""
    if not is_installed("fla"):
        return "none: flash-linear-attention is not installed"
    if not fla_usable:
        return "nothing here: the fla backend is unusable (see its row)"
    return "FLA's own kernels (slime-flashqla calls FLA past its FlashQLA forwarding)"
