"""The short causal convolution and gated RMSNorm: FLA's fused kernels on CUDA, PyTorch otherwise."""

from __future__ import annotations

import functools
import itertools

import torch
import torch.nn.functional as F

from slime_flashqla.gdn.packages import is_installed


@functools.cache
def _fla_causal_conv1d():
    try:
        from fla.modules.causal_conv1d.ops import causal_conv1d
    except ImportError:  # FLA < 0.5 kept it in fla.modules.convolution
        from fla.modules.convolution import causal_conv1d
    return causal_conv1d


@functools.cache
def _fla_rms_norm_gated():
    try:
        from fla.modules.norm.fused_norm_gate import rms_norm_gated
    except ImportError:
        from fla.modules.fused_norm_gate import rms_norm_gated
    return rms_norm_gated


def use_fla_ops(x: torch.Tensor) -> bool:
    """FLA's fused conv/norm kernels serve CUDA tensors when FLA is installed."""
    return x.is_cuda and is_installed("fla")


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
    if use_fla_ops(x):
        out, _ = _fla_causal_conv1d()(x, weight=weight.squeeze(1), bias=None, activation="silu", cu_seqlens=cu_seqlens)
        return out
    return causal_conv1d_silu_torch(x, weight, cu_seqlens)


def rms_norm_gated_torch(x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Qwen3-Next's RMSNormGated: weight * rmsnorm(x) * silu(gate), in float32, cast back."""
    dtype = x.dtype
    x32 = x.float()
    normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    out = weight * normed.to(dtype)
    return (out * F.silu(gate.float())).to(dtype)


def rms_norm_gated(x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Gated RMSNorm over the last dim; FLA's fused kernel on CUDA when present."""
    if use_fla_ops(x):
        return _fla_rms_norm_gated()(x, gate, weight, None, activation="swish", eps=eps)
    return rms_norm_gated_torch(x, gate, weight, eps)
