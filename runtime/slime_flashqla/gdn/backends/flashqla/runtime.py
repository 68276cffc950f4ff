"""FlashQLA's runtime rules: torch, CUDA build, device, compute capability and the flash-qla release.

Every value is read at call time from torch (`torch.__version__`, `torch.version.cuda`,
`torch.cuda.is_available()`, `torch.cuda.get_device_capability`) and from the installed
distributions, so tests can patch them. What a release runs on which GPU is the support table
(releases.py); nothing here imports flash_qla, whose import raises ValueError on a
GPU its release does not dispatch.
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

from slime_flashqla.gdn.backends.flashqla.releases import label, release_for, sm
from slime_flashqla.gdn.errors import FlashQLAUnavailableError
from slime_flashqla.host.packages import installed_version

MIN_TORCH = (2, 8)
MIN_CUDA = (12, 8)


@dataclass(frozen=True)
class RuntimeStatus:
    """The outcome of a FlashQLA runtime check: `ok`, the reason, and what the device can do."""

    ok: bool
    reason: str
    capability: tuple[int, int] | None = None
    forward_only: bool = False
    # Every unmet requirement, each a phrase that follows "FlashQLA" (see `describe_unmet`).
    problems: tuple[str, ...] = ()


def describe_unmet(problems) -> str:
    """One sentence naming every unmet requirement: 'FlashQLA needs ...; needs ...'."""
    return "FlashQLA " + "; ".join(problems)


def _release(text: str, what: str) -> tuple[int, ...]:
    """The numeric release of a version string (`2.8.0a0+git1234` -> (2, 8, 0))."""
    try:
        return Version(text).release
    except InvalidVersion as error:
        raise FlashQLAUnavailableError(f"cannot parse the {what} version {text!r}: {error}") from error


def capability_problem(version: str | None, capability: tuple[int, int], backward: bool) -> str | None:
    """Why flash-qla `version` cannot run (or, with backward, train) on `capability`, or None."""
    release, name = release_for(version), label(version)
    kernels = release.on(capability)
    if capability not in release.kernels:
        return f"needs compute capability {release.supported()} (flash-qla {name}); found {sm(capability)}"
    if not kernels.forward:
        return f"cannot run on {sm(capability)}: flash-qla {name} {kernels.why}; use the 'fla' backend"
    if backward and not kernels.backward:
        return (
            f"cannot train on {sm(capability)}: flash-qla {name} {kernels.why}: "
            "train with the 'fla' backend, or use FlashQLA for inference (backward=False)"
        )
    return None


def flashqla_runtime_status(device=None, *, backward: bool = True) -> RuntimeStatus:
    """Check FlashQLA's runtime requirements, all of them, and return the status instead of raising."""
    import torch

    version = installed_version("flash_qla")
    release = release_for(version)
    problems = []
    # Pre-releases and local builds (2.8.0a0+git..., NGC's builds) count as their release:
    # compare the numeric release, not the full PEP 440 ordering.
    if _release(torch.__version__, "PyTorch")[:2] < MIN_TORCH:
        problems.append(f"needs PyTorch >= 2.8, found {torch.__version__}")
    cuda_build = torch.version.cuda
    if not cuda_build:
        problems.append(f"needs a CUDA build of PyTorch (CUDA >= 12.8); found {torch.__version__} without CUDA")
    elif _release(cuda_build, "CUDA")[:2] < MIN_CUDA:
        problems.append(f"needs PyTorch built with CUDA >= 12.8, found CUDA {cuda_build}")
    if not torch.cuda.is_available():
        problems.append(
            f"needs a CUDA device of compute capability {release.supported()} (flash-qla {label(version)}), "
            "but torch.cuda.is_available() is False (no GPU or driver)"
        )
        return RuntimeStatus(False, describe_unmet(problems), problems=tuple(problems))
    capability = tuple(torch.cuda.get_device_capability(device))
    kernels = release.on(capability)
    forward_only = kernels.forward and not kernels.backward
    problem = capability_problem(version, capability, backward)
    if problem:
        problems.append(problem)
    if problems:
        return RuntimeStatus(False, describe_unmet(problems), capability, forward_only, tuple(problems))
    runs = "forward kernels only" if forward_only else "forward and backward kernels"
    return RuntimeStatus(True, f"{sm(capability)}: {runs} (flash-qla {label(version)})", capability, forward_only)


def validate_flashqla_runtime(device=None, *, backward: bool = True) -> None:
    """Raise FlashQLAUnavailableError unless FlashQLA can run (and, with backward, train) here."""
    status = flashqla_runtime_status(device, backward=backward)
    if not status.ok:
        raise FlashQLAUnavailableError(status.reason)
