"""The GDN layer's short convolution, gates and gated RMSNorm: this package's Triton kernels on CUDA, PyTorch otherwise.

On CUDA they are slime_flashqla.triton_ops' fixed-launch kernels, not FLA's: FLA's gated norm
autotunes per bucket of pack sizes (a stall at every new bucket of an RL stream), and
importing any FLA module imports every FLA layer and model (docs/benchmarks.md has the cost).
"""

from __future__ import annotations

import itertools

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


def causal_conv1d_silu_torch(x: torch.Tensor, weight: torch.Tensor, cu_seqlens=None) -> torch.Tensor:
    """Depthwise causal conv + SiLU over [B, T, D] with weight [D, 1, W]; sequences never mix."""
    width = weight.shape[-1]

    def conv(segment):  # [B, t, D]
        y = F.conv1d(F.pad(segment.transpose(1, 2), (width - 1, 0)), weight, groups=weight.shape[0])
        return F.silu(y).transpose(1, 2)

    if cu_seqlens is None:
        return conv(x)
    offsets = cu_seqlens.tolist()
    # An empty sequence (a repeated offset, as padded packs have) has nothing to convolve.
    return torch.cat([x[:, :0], *(conv(x[:, a:b]) for a, b in itertools.pairwise(offsets) if b > a)], dim=1)


def causal_conv1d_silu(x: torch.Tensor, weight: torch.Tensor, cu_seqlens=None) -> torch.Tensor:
    """Causal short convolution with SiLU; restarts at every cu_seqlens boundary."""
    if use_triton_ops(x):
        return triton_ops.causal_conv1d_silu(x, weight, cu_seqlens)
    return causal_conv1d_silu_torch(x, weight, cu_seqlens)


def short_conv_silu_torch(proj: torch.Tensor, weight: torch.Tensor, cu_seqlens, layout: ProjectionLayout):
    """(q, k, v[, z]) of a projection laid out as `layout`: q/k/v gathered, conv'd and split; z a view."""
    b, t, _ = proj.shape
    groups = proj.view(b, t, layout.groups, layout.group_width)
    qw, vw = layout.q_width, layout.v_width
    starts = (0, qw, 2 * qw)
    parts = [groups[..., s : s + w].reshape(b, t, -1) for s, w in zip(starts, (qw, qw, vw), strict=True)]
    y = causal_conv1d_silu_torch(torch.cat(parts, dim=-1), weight, cu_seqlens)
    q, k, v = torch.split(y, layout.section_widths, dim=-1)
    if not layout.z_width:
        return q, k, v
    return q, k, v, groups[..., layout.group_width - layout.z_width :]


def short_conv_silu(proj: torch.Tensor, weight: torch.Tensor, cu_seqlens, layout: ProjectionLayout):
    """(q, k, v[, z]) of a GDN projection: the short conv read in place, this package's Triton kernels on CUDA."""
    if use_triton_ops(proj):
        return triton_ops.short_conv_silu(proj, weight, cu_seqlens, layout)
    return short_conv_silu_torch(proj, weight, cu_seqlens, layout)


def gdn_gates_torch(a, b, A_log, dt_bias):
    """(g, beta) as slime's and Hugging Face's layers compute them: g in float32, beta in b's dtype."""
    shape = (*a.shape[:2], -1)
    # dt_bias joins in its own dtype, as in slime's layers: float32 from bf16 parameters.
    g = -A_log.float().exp() * F.softplus(a.reshape(shape).float() + dt_bias)
    return g, b.reshape(shape).sigmoid()


def gdn_gates(a, b, A_log, dt_bias):
    """(g float32, beta) from the b/a projections ([B, T, H] or [B, T, Hk, H/Hk]); one fused kernel on CUDA."""
    if use_triton_ops(a):
        return triton_ops.gdn_gates(a, b, A_log, dt_bias)
    return gdn_gates_torch(a, b, A_log, dt_bias)


def rms_norm_gated_torch(x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Qwen3-Next's RMSNormGated: weight * rmsnorm(x) * silu(gate), in float32 (or wider), cast back."""
    dtype = x.dtype
    compute = torch.promote_types(dtype, torch.float32)  # float64 stays float64
    xc = x.to(compute)
    normed = xc * torch.rsqrt(xc.pow(2).mean(-1, keepdim=True) + eps)
    out = weight * normed.to(dtype)
    return (out * F.silu(gate.to(compute))).to(dtype)


def rms_norm_gated(x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Gated RMSNorm over the last dim; this package's Triton kernel on CUDA."""
    if use_triton_ops(x):
        return triton_ops.rms_norm_gated(x, gate, weight, eps)
    return rms_norm_gated_torch(x, gate, weight, eps)
