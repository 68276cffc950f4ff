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


class _SharedInputLinears(torch.autograd.Function):
    """x @ W_i^T for weights that read one input; the input's gradient is summed in the GEMMs themselves."""

    @staticmethod
    def forward(ctx, x, *weights):
        ctx.save_for_backward(x, *weights)
        return tuple(F.linear(x, w) for w in weights)

    @staticmethod
    def backward(ctx, *grads):
        x, *weights = ctx.saved_tensors
        x2 = x.reshape(-1, x.shape[-1])
        dx, dweights = None, []
        for i, (grad, weight) in enumerate(zip(grads, weights, strict=True)):
            if grad is None:
                dweights.append(None)
                continue
            g2 = grad.reshape(-1, grad.shape[-1])
            if ctx.needs_input_grad[0]:
                # addmm_ adds in the GEMM's epilogue: autograd would launch one add kernel over
                # the whole [tokens, hidden] gradient for each projection after the first.
                dx = g2 @ weight if dx is None else dx.addmm_(g2, weight)
            dweights.append(g2.t() @ x2 if ctx.needs_input_grad[i + 1] else None)
        return (None if dx is None else dx.view(x.shape), *dweights)


def shared_input_linears(x: torch.Tensor, *weights: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """F.linear(x, w) for each weight (no bias), with x's gradient accumulated inside the backward GEMMs."""
    if torch.is_autocast_enabled(x.device.type) or not torch.is_grad_enabled():
        # Autocast's casts would have to be replayed in the backward; plain linears do that.
        return tuple(F.linear(x, w) for w in weights)
    return _SharedInputLinears.apply(x, *weights)


def use_triton_ops(x: torch.Tensor) -> bool:
    """This package's fixed-launch Triton kernels serve CUDA tensors; PyTorch serves the rest."""
    return x.is_cuda


def causal_conv1d_silu(x: torch.Tensor, weight: torch.Tensor, cu_seqlens=None) -> torch.Tensor:
    """Causal short convolution with SiLU; restarts at every cu_seqlens boundary."""
    if use_triton_ops(x):
        return triton_ops.causal_conv1d_silu(x, weight, cu_seqlens)
    return triton_ops.causal_conv1d_silu_reference(x, weight, cu_seqlens)


def short_conv_silu(proj: torch.Tensor, weight: torch.Tensor, cu_seqlens, layout: ProjectionLayout):
    """(q, k, v[, z]) of a GDN projection: the short conv read in place, this package's Triton kernels on CUDA."""
    if use_triton_ops(proj):
        return triton_ops.short_conv_silu(proj, weight, cu_seqlens, layout)
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
