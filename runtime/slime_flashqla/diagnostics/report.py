"""The node report behind `slime-flashqla doctor`: versions, GPU, backends, kernel fingerprint, warnings, notes."""

from __future__ import annotations

import platform
import sys

from packaging.version import InvalidVersion, Version

from slime_flashqla.gdn.backends.auto import explain_auto, in_auto_order
from slime_flashqla.host.gpus import driver_cuda, gpus, nvidia_smi_driver
from slime_flashqla.host.packages import kernel_package_versions


def _version(text: str | None) -> Version | None:
    try:
        return Version(text) if text else None
    except InvalidVersion:
        return None


def known_problems(report: dict) -> list[str]:
    """Warnings for known-bad combinations in a doctor report: each backend's, then the driver's."""
    warnings = [warning for backend in in_auto_order() for warning in backend.known_problems(report)]
    supported, torch_cuda = _version(report["driver_cuda"]), _version(report["torch_cuda"])
    if supported and torch_cuda and supported.release[:2] < torch_cuda.release[:2]:
        warnings.append(
            f"the NVIDIA driver supports CUDA {report['driver_cuda']} but PyTorch is built for CUDA "
            f"{report['torch_cuda']}: upgrade the driver (CUDA 12.8 needs driver >= 570)"
        )
    return warnings


def setting_problems() -> list[str]:
    """The package's environment settings that the slime integration refuses, each in the words it refuses them."""
    from slime_flashqla.comm_guard.policy import resolve_policy
    from slime_flashqla.integrations.slime.gdn import split_enabled
    from slime_flashqla.integrations.slime.install import enabled

    problems = []
    for check in (enabled, lambda: resolve_policy(None), split_enabled):
        try:
            check()
        except ValueError as error:
            problems.append(f"{error}; install() refuses it, so every slime actor with the integration fails to start")
    return problems


def report_notes(report: dict) -> list[str]:
    """Facts of this environment worth knowing that ask nothing of the user (unlike `known_problems`)."""
    return [note for backend in in_auto_order() for note in backend.report_notes(report)]


def collect_report() -> dict:
    """Everything `doctor` reports, as plain JSON-ready data (imports no kernel package)."""
    import torch

    from slime_flashqla import __version__
    from slime_flashqla.integrations.slime.report import slime_report
    from slime_flashqla.kernels.cache import tilelang_cache_dir
    from slime_flashqla.kernels.fingerprint import fingerprint
    from slime_flashqla.kernels.preload import preload_setting

    cuda = torch.cuda.is_available()
    backends, facts = {}, {}
    for backend in in_auto_order():
        ok, reason = backend.available(None)
        backends[backend.name] = {"available": ok, "reason": reason}
        facts.update(backend.report())  # its own fields (FlashQLA's support table, FLA's forwarding)
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
        "packages": kernel_package_versions(),
        "backends": backends,
        **facts,
        "auto": {"backend": choice.backend, "reason": choice.reason, "for": "bf16 training, K=V=128"},
        "tilelang_cache_dir": str(tilelang_cache_dir()),
        "kernel_preload": preload_setting(),
        # What `cache export` records and `cache import` and the preload compare (kernels/fingerprint.py).
        "kernel_fingerprint": fingerprint(),
    }
    report["slime"] = slime_report()
    report["setting_problems"] = setting_problems()
    report["warnings"] = known_problems(report) + report["setting_problems"]
    report["notes"] = report_notes(report)
    return report
