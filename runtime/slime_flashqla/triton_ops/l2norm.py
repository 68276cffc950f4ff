"""L2 normalisation over the last dim with FLA's l2norm_fwd/l2norm_bwd contract, on fixed-config kernels.

FLA's kernels autotune on (D, cdiv(rows, 65536)): every new bucket of pack sizes tuned and
compiled ~25 configurations again, a stall mid-training (docs/benchmarks.md). These launch one fixed
configuration, so a process compiles each (dtype, D) once and later processes load it from
Triton's disk cache. `l2norm_reference` is the same normalisation in PyTorch (the `torch`
backend's, gdn/backends/torch/reference.py).
"""

from __future__ import annotations

import functools

import torch

from slime_flashqla.triton_ops._host import (
    cdiv,
    check_float,
    inner_rows,
    next_power_of_2,
    on_tensor_device,
    row_layout,
    rows_of,
)

# A memory-bound row op: 4096 elements a program (32 rows of D=128) over 4 warps is 32
# elements, four 16-byte bf16 vectors, a thread, and leaves >= 2048 programs for 4096 tokens
# of 16 heads; the whole row is one block, so the sum of squares needs no second pass.
TILE_ELEMENTS = 4096
NUM_WARPS = 4
MAX_D = 4096
EPS = 1e-6  # FLA's and FlashQLA's l2norm epsilon


@functools.cache
def _kernels():
    from slime_flashqla.triton_ops.jit import l2norm

    return l2norm


def _block(op: str, d: int) -> tuple[int, int]:
    if not 1 <= d <= MAX_D:
        raise ValueError(f"{op}: the last dim must be 1..{MAX_D}, got {d}")
    bd = next_power_of_2(d)
    return bd, max(1, TILE_ELEMENTS // bd)


@on_tensor_device
def l2norm_fwd(x: torch.Tensor, eps: float = EPS) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, rstd): y = x * rsqrt(sum(x^2) + eps) over the last dim in x's dtype, rstd float32 of x.shape[:-1]."""
    check_float("x", x, "l2norm_fwd")
    d = x.shape[-1]
    bd, bt = _block("l2norm_fwd", d)
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    rstd = torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device)
    rows = rows_of(x)
    if rows:
        x, s_outer, s_inner = row_layout(x)
        _kernels().l2norm_fwd_kernel[(cdiv(rows, bt),)](
            x=x,
            y=y,
            rstd=rstd,
            rows=rows,
            inner=inner_rows(x),
            sx_outer=s_outer,
            sx_inner=s_inner,
            eps=eps,
            D=d,
            BD=bd,
            BT=bt,
            num_warps=NUM_WARPS,
        )
    return y, rstd


@on_tensor_device
def l2norm_bwd(y: torch.Tensor, rstd: torch.Tensor, dy: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """dx of l2norm_fwd from its y and rstd and the output gradient dy (dx in y's dtype); eps is unused, as in FLA."""
    del eps  # y and rstd already carry it; kept for FLA's signature
    check_float("y", y, "l2norm_bwd")
    check_float("dy", dy, "l2norm_bwd")
    if dy.shape != y.shape or rstd.shape != y.shape[:-1]:
        raise ValueError(
            f"l2norm_bwd: dy {tuple(dy.shape)} must match y {tuple(y.shape)} and rstd {tuple(rstd.shape)} "
            f"must be y.shape[:-1]"
        )
    if rstd.dtype != torch.float32:
        raise ValueError(f"l2norm_bwd: rstd must be float32 (as l2norm_fwd returns it), got {rstd.dtype}")
    d = y.shape[-1]
    bd, bt = _block("l2norm_bwd", d)
    dx = torch.empty(y.shape, dtype=y.dtype, device=y.device)
    rows = rows_of(y)
    if rows:
        y, sy_outer, sy_inner = row_layout(y)
        dy, sdy_outer, sdy_inner = row_layout(dy)
        _kernels().l2norm_bwd_kernel[(cdiv(rows, bt),)](
            y=y,
            rstd=rstd.contiguous(),
            dy=dy,
            dx=dx,
            rows=rows,
            inner=inner_rows(y),
            sy_outer=sy_outer,
            sy_inner=sy_inner,
            sdy_outer=sdy_outer,
            sdy_inner=sdy_inner,
            D=d,
            BD=bd,
            BT=bt,
            num_warps=NUM_WARPS,
        )
    return dx


def l2norm_reference(x: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """`l2norm_fwd`'s y in PyTorch, in x's dtype: x / sqrt(sum(x^2) + eps) over the last dimension."""
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + eps)
