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


def _release(text: str, what: str) -> tuple[int, ...]:
    """The numeric release of a version string (`2.8.0a0+git1234` -> (2, 8, 0))."""
    try:
        return Version(text).release
    except InvalidVersion as error:
        raise FlashQLAUnavailableError(f"cannot parse the {what} version {text!r}: {error}") from error


def _sm(capability: tuple[int, int]) -> str:
    return f"SM{capability[0]}{capability[1]}"


def flashqla_runtime_status(device=None, *, backward: bool = True) -> RuntimeStatus:
    """Check FlashQLA's runtime requirements and return the status instead of raising."""
    import torch

    # Pre-releases and local builds (2.8.0a0+git..., NGC's builds) count as their release:
    # compare the numeric release, not the full PEP 440 ordering.
    torch_release = _release(torch.__version__, "PyTorch")
    if torch_release[:2] < MIN_TORCH:
        return RuntimeStatus(False, f"FlashQLA needs PyTorch >= 2.8, found {torch.__version__}")
    cuda_build = torch.version.cuda
    if not cuda_build:
        return RuntimeStatus(
            False, f"FlashQLA needs a CUDA build of PyTorch (CUDA >= 12.8); found {torch.__version__} without CUDA"
        )
    if _release(cuda_build, "CUDA")[:2] < MIN_CUDA:
        return RuntimeStatus(False, f"FlashQLA needs PyTorch built with CUDA >= 12.8, found CUDA {cuda_build}")
    if not torch.cuda.is_available():
        return RuntimeStatus(
            False, "FlashQLA needs a CUDA device, but torch.cuda.is_available() is False (no GPU or driver)"
        )
    capability = tuple(torch.cuda.get_device_capability(device))
    if capability in TRAINING_CAPABILITIES:
        return RuntimeStatus(True, f"{_sm(capability)}: forward and backward kernels", capability)
    if capability in FORWARD_ONLY_CAPABILITIES:
        if backward:
            return RuntimeStatus(
                False,
                f"{_sm(capability)} has FlashQLA forward kernels only (no backward kernel): "
                "train with the 'fla' backend, or use FlashQLA for inference (backward=False)",
                capability,
                forward_only=True,
            )
        return RuntimeStatus(True, f"{_sm(capability)}: forward kernels only", capability, forward_only=True)
    supported = ", ".join([*TRAINING_CAPABILITIES.values(), *FORWARD_ONLY_CAPABILITIES.values()])
    return RuntimeStatus(
        False,
        f"FlashQLA needs compute capability {supported} (SM120/SM121 forward only); found {_sm(capability)}",
        capability,
    )


def validate_flashqla_runtime(device=None, *, backward: bool = True) -> None:
    """Raise FlashQLAUnavailableError unless FlashQLA can run (and, with backward, train) here."""
    status = flashqla_runtime_status(device, backward=backward)
    if not status.ok:
        raise FlashQLAUnavailableError(status.reason)
