"""Depthwise causal conv1d + SiLU with autograd (dx, dweight), restarting at every cu_seqlens boundary.

Each token's sequence comes from a binary search over cu_seqlens inside the kernels, so
nothing is read back to the host (FLA's varlen path builds its chunk indices with a
.tolist()). Rounding follows `causal_conv1d_silu_torch` (layers/ops.py): the conv output
is rounded to x's dtype, as F.conv1d's output tensor is, before the float32 SiLU; FLA
applies SiLU to the float32 sum and rounds once. Gradients are float32 sums cast once.

cu_seqlens is trusted as the caller checked it (layers/gated_deltanet.py runs
gdn.inputs.check_cu_seqlens first): checking its values here would need a host sync.

dweight: each backward program writes a float32 partial [D, W] for its tokens, summed by
torch afterwards: no atomics, deterministic for a given token count.
"""

from __future__ import annotations

import functools

import torch

from slime_flashqla.triton_ops._host import cdiv, check_float, next_power_of_2, on_tensor_device

# Forward: a 64-token x 128-channel tile (256 contiguous bytes of bf16 a row) over 8 warps
# is 32 float32 accumulators a thread; the W-1 halo tokens are re-read from L1/L2, 5% of
# the tile. Backward recomputes the conv at W shifted token sets, so its tiles are
# 32 x 128 over 4 warps, and a program walks 4 of them (128 tokens) so that the float32
# dweight partials stay at 1/16 of x's bf16 bytes (32 MiB at 32768 tokens of D=8192)
# while 4096 tokens still give 2048 programs at D=8192. Left alone, ptxas gives the backward
# all 255 registers (2 programs, 8 warps an SM); compiled for sm_90 it fits in 128 with no
# spills, so it is capped there: 4 programs, 16 warps an SM.
FWD_BT, FWD_BD, FWD_WARPS = 64, 128, 8
BWD_BT, BWD_BD, BWD_TILES, BWD_WARPS, BWD_MAX_REGISTERS = 32, 128, 4, 4, 128
MAX_WIDTH = 8


@functools.cache
def _kernels():
    from slime_flashqla.triton_ops.jit import causal_conv1d

    return causal_conv1d


def _check(x, weight, cu_seqlens):
    op = "causal_conv1d_silu"
    check_float("x", x, op)
    check_float("weight", weight, op)
    if x.dim() != 3:
        raise ValueError(f"{op}: x must be [B, T, D], got shape {tuple(x.shape)}")
    d = x.shape[-1]
    if weight.dim() == 3 and weight.shape[1] == 1:
        width = weight.shape[2]
    elif weight.dim() == 2:
        width = weight.shape[1]
    else:
        raise ValueError(f"{op}: weight must be [D, 1, W] (nn.Conv1d's) or [D, W], got {tuple(weight.shape)}")
    if weight.shape[0] != d:
        raise ValueError(f"{op}: weight has {weight.shape[0]} channels but x has D={d}")
    if not 1 <= width <= MAX_WIDTH:
        raise ValueError(f"{op}: the kernel width must be 1..{MAX_WIDTH}, got {width}")
    if weight.device != x.device:
        raise ValueError(f"{op}: x and weight must be on one device, got {x.device} and {weight.device}")
    if cu_seqlens is not None:
        if x.shape[0] != 1:
            raise ValueError(f"{op}: with cu_seqlens x must be packed as B == 1, got B={x.shape[0]}")
        if cu_seqlens.dim() != 1 or cu_seqlens.numel() < 2 or cu_seqlens.dtype not in (torch.int32, torch.int64):
            raise ValueError(
                f"{op}: cu_seqlens must be a 1-D int32/int64 tensor of N+1 offsets, got "
                f"{cu_seqlens.dtype} of shape {tuple(cu_seqlens.shape)}"
            )
        if cu_seqlens.device != x.device:
            raise ValueError(f"{op}: cu_seqlens is on {cu_seqlens.device}, x on {x.device}")
    return width


def _launch_args(x, weight, cu_seqlens):
    """(x with unit channel stride, weight strides, cu_seqlens or a dummy pointer, sequence count, search steps)."""
    if x.stride(-1) != 1:
        x = x.contiguous()
    sw_d, sw_w = weight.stride(0), weight.stride(-1)
    if cu_seqlens is None:
        return x, (sw_d, sw_w), x, 1, 0
    n_seqs = cu_seqlens.numel() - 1
    return x, (sw_d, sw_w), cu_seqlens, n_seqs, n_seqs.bit_length()


def _batch_stride(t):
    # B == 1 (every packed call) passes 0, so a huge T * D never turns the argument int64
    # and recompiles the kernel.
    return t.stride(0) if t.shape[0] > 1 else 0


def _forward(x, weight, cu_seqlens, width):
    b, t, d = x.shape
    y = torch.empty((b, t, d), dtype=x.dtype, device=x.device)
    if y.numel():
        x, (sw_d, sw_w), cu, n_seqs, n_iter = _launch_args(x, weight, cu_seqlens)
        grid = (cdiv(d, FWD_BD), cdiv(t, FWD_BT), b)
        _kernels().causal_conv1d_silu_fwd_kernel[grid](
            x,
            weight,
            y,
            cu,
            t,
            n_seqs,
            n_iter,
            _batch_stride(x),
            x.stride(1),
            sw_d,
            sw_w,
            D=d,
            W=width,
            BT=FWD_BT,
            BD=FWD_BD,
            VARLEN=cu_seqlens is not None,
            num_warps=FWD_WARPS,
        )
    return y


def _backward(x, weight, cu_seqlens, width, dy):
    b, t, d = x.shape
    dx = torch.empty((b, t, d), dtype=x.dtype, device=x.device)
    token_blocks = cdiv(t, BWD_BT * BWD_TILES)
    dw_partial = torch.zeros((b * token_blocks, d, width), dtype=torch.float32, device=x.device)
    if dx.numel():
        x, (sw_d, sw_w), cu, n_seqs, n_iter = _launch_args(x, weight, cu_seqlens)
        if dy.stride(-1) != 1:
            dy = dy.contiguous()
        grid = (cdiv(d, BWD_BD), token_blocks, b)
        _kernels().causal_conv1d_silu_bwd_kernel[grid](
            x,
            weight,
            dy,
            dx,
            dw_partial,
            cu,
            t,
            n_seqs,
            n_iter,
            _batch_stride(x),
            x.stride(1),
            _batch_stride(dy),
            dy.stride(1),
            sw_d,
            sw_w,
            D=d,
            W=width,
            BW=next_power_of_2(width),
            BT=BWD_BT,
            BD=BWD_BD,
            TILES=BWD_TILES,
            VARLEN=cu_seqlens is not None,
            num_warps=BWD_WARPS,
            maxnreg=BWD_MAX_REGISTERS,
        )
    return dx, dw_partial.sum(0).view(weight.shape).to(weight.dtype)


class CausalConv1dSilu(torch.autograd.Function):
    """silu(causal depthwise conv1d(x, weight)) per packed sequence, with dx and dweight."""

    @staticmethod
    def forward(ctx, x, weight, cu_seqlens, width):
        ctx.save_for_backward(x, weight, cu_seqlens)
        ctx.width = width
        return _forward(x, weight, cu_seqlens, width)

    @staticmethod
    def backward(ctx, dy):
        x, weight, cu_seqlens = ctx.saved_tensors
        dx, dw = _backward(x, weight, cu_seqlens, ctx.width, dy)
        return dx, dw, None, None


@on_tensor_device
def causal_conv1d_silu(x: torch.Tensor, weight: torch.Tensor, cu_seqlens: torch.Tensor | None = None) -> torch.Tensor:
    """silu(depthwise causal conv1d) of x [B, T, D] with weight [D, 1, W], restarting at cu_seqlens (B == 1)."""
    width = _check(x, weight, cu_seqlens)
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad):
        return CausalConv1dSilu.apply(x, weight, cu_seqlens, width)
    return _forward(x, weight, cu_seqlens, width)
