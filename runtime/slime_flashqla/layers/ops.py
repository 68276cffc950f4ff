"""The GDN layer's short convolution, gates and gated RMSNorm: this package's Triton kernels on CUDA, PyTorch otherwise.

On CUDA they are slime_flashqla.triton_ops' fixed-launch kernels, not FLA's: FLA's gated norm
autotunes per bucket of pack sizes (a stall at every new bucket of an RL stream), and
importing any FLA module imports every FLA layer and model (docs/benchmarks.md has the cost).
Elsewhere each op's PyTorch reference runs, which lives beside the op (`triton_ops/<op>.py`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from slime_flashqla import triton_ops  # imports no triton: its kernels load on first call
from slime_flashqla.triton_ops.causal_conv1d import ProjectionLayout


def _with_spare_columns(grad: torch.Tensor, needed: int) -> torch.Tensor | None:
    """grad as a [rows, width + needed] matrix reaching into the columns after it in its own buffer, or None."""
    width = grad.shape[-1]
    rows = grad.numel() // width if width else 0
    try:
        matrix = grad.view(rows, width)
    except RuntimeError:  # leading dims that one row stride cannot address
        return None
    row_stride = matrix.stride(0)
    if rows < 2 or matrix.stride(1) != 1 or row_stride < width + needed:
        return None
    end = matrix.storage_offset() + (rows - 1) * row_stride + width + needed
    if end * matrix.element_size() > matrix.untyped_storage().nbytes():
        return None
    return matrix.as_strided((rows, width + needed), (row_stride, 1))


def _folded(grads, folded: int) -> torch.Tensor | None:
    """The first output's gradient with the last `folded` ones copied into its rows' spare columns, or None.

    The spare columns are short_conv_silu's `grad_spare_columns`. One GEMM over this matrix
    then gives the input gradient of all of them (their weights stacked) and one their weight
    gradients, where separate ones would each read and write the whole [tokens, hidden] input
    gradient (addmm_) or read the input again for a few columns.
    """
    narrow = grads[len(grads) - folded :]
    if not folded or grads[0] is None or any(g is None for g in narrow):
        return None
    wide = _with_spare_columns(grads[0], sum(g.shape[-1] for g in narrow))
    if wide is None:
        return None
    column = grads[0].shape[-1]
    for grad in narrow:
        wide[:, column : column + grad.shape[-1]].copy_(grad.reshape(-1, grad.shape[-1]))
        column += grad.shape[-1]
    return wide


class _SharedInputLinears(torch.autograd.Function):
    """x @ W_i^T for weights that read one input; the input's gradient is summed in the GEMMs themselves."""

    @staticmethod
    def forward(ctx, x, folded, *weights):
        ctx.save_for_backward(x, *weights)
        ctx.folded = folded
        return tuple(F.linear(x, w) for w in weights)

    @staticmethod
    def backward(ctx, *grads):
        x, *weights = ctx.saved_tensors
        x2 = x.reshape(-1, x.shape[-1])
        grads, needs = list(grads), ctx.needs_input_grad[2:]
        dx, dweights = None, [None] * len(weights)
        wide = _folded(grads, ctx.folded)
        if wide is not None:
            parts = (0, *range(len(weights) - ctx.folded, len(weights)))
            if ctx.needs_input_grad[0]:
                dx = wide @ torch.cat([weights[i] for i in parts])
            if any(needs[i] for i in parts):
                # Their weight gradients as one GEMM too: a few more rows of output tiles than the
                # first's alone, not a GEMM over the whole input each (docs/benchmarks.md has the run).
                rows = [weights[i].shape[0] for i in parts]
                for i, dweight in zip(parts, (wide.t() @ x2).split(rows), strict=True):
                    dweights[i] = dweight if needs[i] else None
            for i in parts:
                grads[i] = None  # taken care of
        for i, (grad, weight) in enumerate(zip(grads, weights, strict=True)):
            if grad is None:
                continue
            g2 = grad.reshape(-1, grad.shape[-1])
            if ctx.needs_input_grad[0]:
                # addmm_ adds in the GEMM's epilogue: autograd would launch one add kernel over
                # the whole [tokens, hidden] gradient for each projection after the first.
                dx = g2 @ weight if dx is None else dx.addmm_(g2, weight)
            dweights[i] = g2.t() @ x2 if needs[i] else None
        return (None if dx is None else dx.view(x.shape), None, *dweights)


def shared_input_linears(x: torch.Tensor, *weights: torch.Tensor, folded: int = 0) -> tuple[torch.Tensor, ...]:
    """F.linear(x, w) for each weight (no bias), with x's gradient accumulated inside the backward GEMMs.

    `folded`: the last `folded` outputs' gradients join the first output's GEMMs in the backward
    when its gradient has spare columns for them (short_conv_silu's `grad_spare_columns`).
    """
    if torch.is_autocast_enabled(x.device.type) or not torch.is_grad_enabled():
        # Autocast's casts would have to be replayed in the backward; plain linears do that.
        return tuple(F.linear(x, w) for w in weights)
    if not 0 <= folded < len(weights):
        raise ValueError(f"shared_input_linears: folded must be 0..{len(weights) - 1}, got {folded}")
    return _SharedInputLinears.apply(x, folded, *weights)


def use_triton_ops(x: torch.Tensor) -> bool:
    """This package's fixed-launch Triton kernels serve CUDA tensors; PyTorch serves the rest."""
    return x.is_cuda


def causal_conv1d_silu(x: torch.Tensor, weight: torch.Tensor, cu_seqlens=None) -> torch.Tensor:
    """Causal short convolution with SiLU; restarts at every cu_seqlens boundary."""
    if use_triton_ops(x):
        return triton_ops.causal_conv1d_silu(x, weight, cu_seqlens)
    return triton_ops.causal_conv1d_silu_reference(x, weight, cu_seqlens)


def short_conv_silu(
    proj: torch.Tensor, weight: torch.Tensor, cu_seqlens, layout: ProjectionLayout, *, grad_spare_columns: int = 0
):
    """(q, k, v[, z]) of a GDN projection: the short conv read in place, this package's Triton kernels on CUDA.

    `grad_spare_columns` reaches the Triton op only (the reference's gradient is dense).
    """
    if use_triton_ops(proj):
        return triton_ops.short_conv_silu(proj, weight, cu_seqlens, layout, grad_spare_columns=grad_spare_columns)
    return triton_ops.short_conv_silu_reference(proj, weight, cu_seqlens, layout)


def gdn_gates(a, b, A_log, dt_bias):
    """(g float32, beta) from the b/a projections ([B, T, H] or [B, T, Hk, H/Hk]); one fused kernel on CUDA."""
    if use_triton_ops(a):
        return triton_ops.gdn_gates(a, b, A_log, dt_bias)
    return triton_ops.gdn_gates_reference(a, b, A_log, dt_bias)


def rms_norm_gated(x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Gated RMSNorm over the last dim; this package's Triton kernel on CUDA."""
    if use_triton_ops(x):
        return triton_ops.rms_norm_gated(x, gate, weight, eps)
    return triton_ops.rms_norm_gated_reference(x, gate, weight, eps)
