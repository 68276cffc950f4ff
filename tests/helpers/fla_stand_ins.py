"""PyTorch stand-ins for the two FLA modules slime's GDN layers build, for machines without FLA or a GPU.

They follow FLA's definitions (fla.modules.ShortConvolution with SiLU, FusedRMSNormGated with
swish): the conv's SiLU reads the unrounded sum, the gated norm rounds once at the end. They
hold the same parameters under the same names (`weight`), so state dicts load unchanged.
"""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F
from torch import nn


class ShortConvolution(nn.Conv1d):
    """Depthwise causal conv1d + SiLU over [B, T, D], restarting at every cu_seqlens boundary."""

    def __init__(self, hidden_size: int, kernel_size: int, bias: bool = False, activation="silu", **_):
        super().__init__(hidden_size, hidden_size, kernel_size, groups=hidden_size, padding=kernel_size - 1, bias=bias)
        assert activation in ("silu", "swish")

    def forward(self, x, cu_seqlens=None, **_):
        return _conv_silu(x, self.weight.squeeze(1), cu_seqlens), None


class FusedRMSNormGated(nn.Module):
    """weight * x / rms(x) * silu(z) over the last dim, in float32 (or wider), rounded once."""

    def __init__(self, hidden_size: int, eps: float = 1e-5, activation: str = "swish", dtype=None, **_):
        super().__init__()
        assert activation in ("silu", "swish")
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden_size, dtype=dtype))

    def forward(self, x, z):
        compute = torch.promote_types(x.dtype, torch.float32)
        xc = x.to(compute)
        normed = xc * torch.rsqrt(xc.square().mean(-1, keepdim=True) + self.eps)
        return (self.weight.to(compute) * normed * F.silu(z.to(compute))).to(x.dtype)


def causal_conv1d(x, weight, bias=None, activation=None, cu_seqlens=None, **_):
    """fla.modules.convolution.causal_conv1d with SiLU (Megatron's call): x [B, T, D], weight [D, W]; (y, None)."""
    assert activation in ("silu", "swish") and bias is None
    return _conv_silu(x, weight, cu_seqlens), None


def _conv_silu(x, weight, cu_seqlens):
    """Depthwise causal conv of x [B, T, D] with weight [D, W], then SiLU, per cu_seqlens sequence."""
    width = weight.shape[-1]
    bounds = [0, x.shape[1]] if cu_seqlens is None else cu_seqlens.tolist()
    parts = []
    for start, end in itertools.pairwise(bounds):
        windows = F.pad(x[:, start:end], (0, 0, width - 1, 0)).unfold(1, width, 1)  # [B, t, D, W]
        compute = torch.promote_types(x.dtype, torch.float32)
        pre = (windows.to(compute) * weight.to(compute)).sum(-1)
        parts.append(F.silu(pre).to(x.dtype))
    return torch.cat(parts, dim=1)
