"""The short causal convolution and gated RMSNorm: this package's Triton kernels on CUDA, PyTorch otherwise.

On CUDA they are slime_flashqla.triton_ops' fixed-launch kernels, not FLA's: FLA's gated norm
autotunes per bucket of pack sizes (a stall at every new bucket of an RL stream), and
importing any FLA module imports every FLA layer and model (21.7 s of a warm start on an H200).
"""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F

from slime_flashqla import triton_ops  # imports no triton: its kernels load on first call


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
    return torch.cat([conv(x[:, a:b]) for a, b in itertools.pairwise(offsets)], dim=1)


def causal_conv1d_silu(x: torch.Tensor, weight: torch.Tensor, cu_seqlens=None) -> torch.Tensor:
    """Causal short convolution with SiLU; restarts at every cu_seqlens boundary."""
    if use_triton_ops(x):
        return triton_ops.causal_conv1d_silu(x, weight, cu_seqlens)
    return causal_conv1d_silu_torch(x, weight, cu_seqlens)


def rms_norm_gated_torch(x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Qwen3-Next's RMSNormGated: weight * rmsnorm(x) * silu(gate), in float32, cast back."""
    dtype = x.dtype
    x32 = x.float()
    normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    out = weight * normed.to(dtype)
    return (out * F.silu(gate.float())).to(dtype)


def rms_norm_gated(x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Gated RMSNorm over the last dim; this package's Triton kernel on CUDA."""
    if use_triton_ops(x):
        return triton_ops.rms_norm_gated(x, gate, weight, eps)
    return rms_norm_gated_torch(x, gate, weight, eps)
