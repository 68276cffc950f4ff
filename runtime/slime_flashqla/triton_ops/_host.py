"""Host-side helpers the three ops share: row layouts, dtype checks, the launch device."""

from __future__ import annotations

import functools
import os

import torch

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= n (n >= 1)."""
    return 1 << (n - 1).bit_length()


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for non-negative ints."""
    return -(-a // b)


def interpreting() -> bool:
    """Whether the kernels run in Triton's CPU interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


def check_float(name: str, t: torch.Tensor, op: str) -> None:
    """Raise a one-line ValueError unless `t` is a float16/bfloat16/float32 tensor a kernel can read."""
    if t.dtype not in FLOAT_DTYPES:
        raise ValueError(f"{op}: {name} must be float16, bfloat16 or float32, got {t.dtype}")
    if not t.is_cuda and not interpreting():
        raise ValueError(f"{op}: {name} is on {t.device}; these Triton kernels need CUDA tensors")


def row_layout(t: torch.Tensor) -> tuple[torch.Tensor, int, int]:
    """(t, outer stride, inner stride) addressing row r of t's last dim at (r // H) * outer + (r % H) * inner.

    H is t.shape[-2] for t.dim() >= 3 and 1 below that, so a [B, T, H, D] slice of a wider
    projection (q/k straight out of the conv's split, rows 16 heads apart) is read in place
    instead of copied. Only layouts that two strides cannot describe are made contiguous.
    """
    if t.stride(-1) != 1 and t.shape[-1] != 1:
        t = t.contiguous()
    if t.dim() == 1:
        return t, 0, 0
    if t.dim() == 2:
        return t, t.stride(0), 0
    outer, expected = None, None
    for size, stride in zip(reversed(t.shape[:-2]), reversed(t.stride()[:-2]), strict=True):
        if size == 1:
            continue
        if expected is not None and stride != expected:
            t = t.contiguous()
            return t, t.shape[-2] * t.shape[-1], t.shape[-1]
        outer = stride if outer is None else outer
        expected = stride * size
    return t, (0 if outer is None else outer), t.stride(-2)


def inner_rows(t: torch.Tensor) -> int:
    """The H of row_layout: how many consecutive rows share one outer index."""
    return t.shape[-2] if t.dim() >= 3 else 1


def rows_of(t: torch.Tensor) -> int:
    """Rows of t's last dim: every leading dim flattened."""
    return t.numel() // t.shape[-1] if t.shape[-1] else 0


def on_tensor_device(fn):
    """Run fn with the first tensor argument's CUDA device current: Triton launches on the current one."""

    @functools.wraps(fn)
    def wrapper(t, *args, **kwargs):
        if t.is_cuda and t.get_device() != torch.cuda.current_device():
            with torch.cuda.device(t.device):
                return fn(t, *args, **kwargs)
        return fn(t, *args, **kwargs)

    return wrapper
