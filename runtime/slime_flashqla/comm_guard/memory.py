"""Reading free memory, freeing it below a threshold (the check every policy runs), and describing it in error notes."""

from __future__ import annotations

import gc
import warnings
from collections.abc import Callable

import torch

GIB = 1024**3  # slime's "GB" is bytes / 1024**3 (slime/utils/memory_utils.py): GiB


def probe() -> int | None:
    """Return free bytes on the current CUDA device, or None where CUDA is not initialized."""
    # mem_get_info on an uninitialized CUDA would create a context (hundreds of
    # MiB on the device): exactly the allocation the guard exists to make room for.
    if not torch.cuda.is_initialized():
        return None
    return torch.cuda.mem_get_info()[0]


def free_cached_memory() -> None:
    """Synchronize, collect garbage and release the CUDA caching allocator's unused blocks."""
    cuda = torch.cuda.is_initialized()
    if cuda:
        torch.cuda.synchronize()
    gc.collect()
    if cuda:
        # NCCL allocates its buffers with cudaMalloc, outside PyTorch's cache:
        # blocks the cache holds but does not use are invisible to it.
        torch.cuda.empty_cache()


class MemoryCheck:
    """Probe free memory and, below the threshold, free memory with `on_low`; a failing probe warns once."""

    __slots__ = ("on_low", "probe", "threshold_bytes", "warned", "who")

    def __init__(
        self,
        threshold_bytes: int = 0,
        probe: Callable[[], int | None] = probe,
        on_low: Callable[[], None] = free_cached_memory,
        who: str = "slime_flashqla.comm_guard",
    ) -> None:
        self.threshold_bytes, self.probe, self.on_low, self.who = threshold_bytes, probe, on_low, who
        self.warned = False

    def run(self, counts: list[int]) -> None:
        """Count a check in counts[0] and a clearing in counts[1]; never raise (the check is advisory)."""
        counts[0] += 1
        try:
            free = self.probe()
            if free is not None and free < self.threshold_bytes:
                self.on_low()
                counts[1] += 1
        except Exception as exc:  # a failing probe must not break the collective
            if not self.warned:
                self.warned = True
                warnings.warn(
                    f"{self.who}: memory probe failed ({type(exc).__name__}: {exc}); "
                    "collectives continue unchecked where it fails",
                    RuntimeWarning,
                    stacklevel=4,
                )


def _host_memory() -> str:
    """Describe host memory from /proc/meminfo, or say it is unknown."""
    try:
        fields = {}
        with open("/proc/meminfo") as f:
            for line in f:
                key, _, rest = line.partition(":")
                fields[key] = int(rest.split()[0]) * 1024
        return f"host {fields['MemAvailable'] / GIB:.2f} GiB available of {fields['MemTotal'] / GIB:.2f} GiB"
    except (OSError, KeyError, ValueError, IndexError):
        return "host memory unknown (no /proc/meminfo)"


def _gpu_memory() -> str:
    """Describe free/total memory of the current CUDA device, or say why it is unknown."""
    if not torch.cuda.is_initialized():
        return "GPU memory unknown (CUDA not initialized in this process)"
    try:
        device = torch.cuda.current_device()
        free, total = torch.cuda.mem_get_info(device)
    except Exception as exc:  # a broken device must not hide the collective's own error
        return f"GPU memory unknown ({type(exc).__name__}: {exc})"
    return f"GPU cuda:{device} {free / GIB:.2f} GiB free of {total / GIB:.2f} GiB"


def memory_note(op_name: str, policy: str | None, threshold_bytes: int) -> str:
    """Build the PEP 678 note added to an exception raised by a guarded collective."""
    setting = f"policy {policy}, threshold {threshold_bytes / GIB:.2f} GiB" if policy else "guard inactive"
    return (
        f"slime_flashqla.comm_guard: torch.distributed {op_name} raised; {_gpu_memory()}; {_host_memory()}; {setting}"
    )
