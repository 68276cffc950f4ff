"""Qwen3-Next's gated RMSNorm, weight * rmsnorm(x) * silu(gate), with autograd, on fixed-config kernels.

Rounding follows `rms_norm_gated_reference` (below), not FLA: the reference casts the
normalised x to x's dtype, multiplies by the weight in torch's promoted dtype (so a bf16
weight rounds the product to bf16 once more), and only then multiplies by silu(gate) in
float32 and casts back. FLA's rms_norm_gated(..., activation="swish") keeps x * rstd * w *
silu(g) in float32 and rounds once, so in bf16 the two differ by up to about one bf16 ulp
of the output. Gradients are computed in float32 from the same rounded values and cast
once (torch's own autograd of the reference rounds some intermediates to bf16).

dweight: each backward program sums its rows into one float32 partial row, and the
partials are summed by torch afterwards: no atomics, so the result is deterministic for
a given row count.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from slime_flashqla.triton_ops._host import (
    cdiv,
    check_float,
    inner_rows,
    next_power_of_2,
    on_tensor_device,
    row_layout,
    rows_of,
)

# Forward: 4096 elements (32 rows of D=128) over 4 warps, as in l2norm: x, gate and y each
# take four 16-byte bf16 vectors a thread. Backward holds x, gate, dy and a dweight
# accumulator at once, so its tiles are half as tall (16 rows) and a program walks 8 of
# them: 128 rows a program keeps the float32 partials at 1/64 of x's bytes in bf16 while
# 4096 tokens of 32 heads still give 1024 programs.
FWD_TILE_ELEMENTS = 4096
BWD_TILE_ELEMENTS = 2048
BWD_TILES = 8
NUM_WARPS = 4
MAX_D = 4096


@functools.cache
def _kernels():
    from slime_flashqla.triton_ops.jit import rms_norm_gated

    return rms_norm_gated


def _check(x, gate, weight):
    op = "rms_norm_gated"
    check_float("x", x, op)
    check_float("gate", gate, op)
    check_float("weight", weight, op)
    d = x.shape[-1]
    if gate.shape != x.shape:
        raise ValueError(f"{op}: gate {tuple(gate.shape)} must have x's shape {tuple(x.shape)}")
    if weight.shape != (d,):
        raise ValueError(f"{op}: weight must be [{d}] (x's last dim), got {tuple(weight.shape)}")
    if gate.device != x.device or weight.device != x.device:
        devices = f"{x.device}, {gate.device}, {weight.device}"
        raise ValueError(f"{op}: x, gate and weight must be on one device, got {devices}")
    if not 1 <= d <= MAX_D:
        raise ValueError(f"{op}: the last dim must be 1..{MAX_D}, got {d}")


def _round_product(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether the reference's weight * normed lands in x's low-precision dtype (and rounds there)."""
    return x.dtype != torch.float32 and torch.promote_types(weight.dtype, x.dtype) == x.dtype


def _forward(x, gate, weight, eps):
    d = x.shape[-1]
    bd = next_power_of_2(d)
    bt = max(1, FWD_TILE_ELEMENTS // bd)
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    rstd = torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device)
    rows = rows_of(x)
    if rows:
        xl, sx_outer, sx_inner = row_layout(x)
        gl, sg_outer, sg_inner = row_layout(gate)
        _kernels().rms_norm_gated_fwd_kernel[(cdiv(rows, bt),)](
            x=xl,
            g=gl,
            w=weight.contiguous(),
            y=y,
            rstd=rstd,
            rows=rows,
            inner=inner_rows(x),
            sx_outer=sx_outer,
            sx_inner=sx_inner,
            sg_outer=sg_outer,
            sg_inner=sg_inner,
            eps=eps,
            D=d,
            BD=bd,
            BT=bt,
            ROUND_PRODUCT=_round_product(x, weight),
            num_warps=NUM_WARPS,
        )
    return y, rstd


def _backward(x, gate, weight, rstd, dy):
    d = x.shape[-1]
    bd = next_power_of_2(d)
    bt = max(1, BWD_TILE_ELEMENTS // bd)
    dx = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    dg = torch.empty(gate.shape, dtype=gate.dtype, device=gate.device)
    rows = rows_of(x)
    programs = cdiv(rows, bt * BWD_TILES)
    dw_partial = torch.empty((programs, d), dtype=torch.float32, device=x.device)
    if rows:
        xl, sx_outer, sx_inner = row_layout(x)
        gl, sg_outer, sg_inner = row_layout(gate)
        dyl, sdy_outer, sdy_inner = row_layout(dy)
        _kernels().rms_norm_gated_bwd_kernel[(programs,)](
            x=xl,
            g=gl,
            w=weight.contiguous(),
            rstd=rstd,
            dy=dyl,
            dx=dx,
            dg=dg,
            dw_partial=dw_partial,
            rows=rows,
            inner=inner_rows(x),
            sx_outer=sx_outer,
            sx_inner=sx_inner,
            sg_outer=sg_outer,
            sg_inner=sg_inner,
            sdy_outer=sdy_outer,
            sdy_inner=sdy_inner,
            D=d,
            BD=bd,
            BT=bt,
            TILES=BWD_TILES,
            ROUND_PRODUCT=_round_product(x, weight),
            num_warps=NUM_WARPS,
        )
    return dx, dg, dw_partial.sum(0).to(weight.dtype)


class RMSNormGated(torch.autograd.Function):
    """weight * rmsnorm(x) * silu(gate) over the last dim, with dx, dgate and dweight."""

    @staticmethod
    def forward(ctx, x, gate, weight, eps):
        y, rstd = _forward(x, gate, weight, eps)
        ctx.save_for_backward(x, gate, weight, rstd)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, gate, weight, rstd = ctx.saved_tensors
        dx, dg, dw = _backward(x, gate, weight, rstd, dy)
        return dx, dg, dw, None


@on_tensor_device
def rms_norm_gated(x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Qwen3-Next's RMSNormGated over the last dim (rounding as rms_norm_gated_reference), differentiable."""
    _check(x, gate, weight)
    if torch.is_grad_enabled() and (x.requires_grad or gate.requires_grad or weight.requires_grad):
        return RMSNormGated.apply(x, gate, weight, eps)
    return _forward(x, gate, weight, eps)[0]


def rms_norm_gated_reference(x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """`rms_norm_gated` in PyTorch: weight * rmsnorm(x) * silu(gate), in float32 (or wider), cast back."""
    dtype = x.dtype
    compute = torch.promote_types(dtype, torch.float32)  # float64 stays float64
    xc = x.to(compute)
    normed = xc * torch.rsqrt(xc.pow(2).mean(-1, keepdim=True) + eps)
    out = weight * normed.to(dtype)
    return (out * F.silu(gate.to(compute))).to(dtype)
