"""FlashQLA runtime validation: torch, CUDA build, device and compute capability.

Every value is read at call time from torch (`torch.__version__`, `torch.version.cuda`,
`torch.cuda.is_available()`, `torch.cuda.get_device_capability`) so tests can patch them,
and nothing here imports flash_qla: on an unsupported GPU its import raises ValueError.
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

from slime_flashqla.gdn.errors import FlashQLAUnavailableError

MIN_TORCH = (2, 8)
MIN_CUDA = (12, 8)
# FlashQLA 0.1.x ships forward and backward kernels for these capabilities ...
TRAINING_CAPABILITIES = {(9, 0): "SM90", (10, 0): "SM100", (10, 3): "SM103"}
# ... and forward-only kernels for consumer / GB10 Blackwell.
FORWARD_ONLY_CAPABILITIES = {(12, 0): "SM120", (12, 1): "SM121"}


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


def _sm(capability: tuple[int, int]) -> str:
    return f"SM{capability[0]}{capability[1]}"


def _supported() -> str:
    return (
        ", ".join(TRAINING_CAPABILITIES.values())
        + " ("
        + "/".join(FORWARD_ONLY_CAPABILITIES.values())
        + ": forward only)"
    )


def flashqla_runtime_status(device=None, *, backward: bool = True) -> RuntimeStatus:
    """Check FlashQLA's runtime requirements, all of them, and return the status instead of raising."""
    import torch

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
            f"needs a CUDA device of compute capability {_supported()}, "
            "but torch.cuda.is_available() is False (no GPU or driver)"
        )
        return RuntimeStatus(False, describe_unmet(problems), problems=tuple(problems))
    capability = tuple(torch.cuda.get_device_capability(device))
    forward_only = capability in FORWARD_ONLY_CAPABILITIES
    if forward_only and backward:
        problems.append(
            f"has {_sm(capability)} forward kernels only (no backward kernel): "
            "train with the 'fla' backend, or use FlashQLA for inference (backward=False)"
        )
    elif capability not in TRAINING_CAPABILITIES and not forward_only:
        problems.append(f"needs compute capability {_supported()}; found {_sm(capability)}")
    if problems:
        return RuntimeStatus(False, describe_unmet(problems), capability, forward_only, tuple(problems))
    kernels = "forward kernels only" if forward_only else "forward and backward kernels"
    return RuntimeStatus(True, f"{_sm(capability)}: {kernels}", capability, forward_only)


def validate_flashqla_runtime(device=None, *, backward: bool = True) -> None:
    """Raise FlashQLAUnavailableError unless FlashQLA can run (and, with backward, train) here."""
    status = flashqla_runtime_status(device, backward=backward)
    if not status.ok:
        raise FlashQLAUnavailableError(status.reason)
