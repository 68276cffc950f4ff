"""On a GPU: one compile per (dtype, D, W) whatever the token count, and no host sync on the launch path."""

from __future__ import annotations

import pytest
import torch

from slime_flashqla import triton_ops
from slime_flashqla.triton_ops.causal_conv1d import _kernels as conv_kernels
from slime_flashqla.triton_ops.l2norm import _kernels as l2norm_kernels
from slime_flashqla.triton_ops.rms_norm_gated import _kernels as norm_kernels

from .references import cu_seqlens_of

pytestmark = pytest.mark.gpu
TOKEN_COUNTS = (1, 17, 4096, 5003, 70000)


def _step(tokens: int, dtype=torch.bfloat16):
    """One forward + backward of each op at `tokens` tokens, GDN-layer shapes (16/32 heads of 128)."""
    dev = "cuda"
    lengths = [tokens] if tokens < 3 else [1, 2, tokens - 3]
    cu = cu_seqlens_of(lengths, device=dev)
    x = torch.randn(1, tokens, 3 * 2048, device=dev, dtype=dtype, requires_grad=True)
    w = torch.randn(3 * 2048, 1, 4, device=dev, dtype=dtype, requires_grad=True)
    mixed = triton_ops.causal_conv1d_silu(x, w, cu)
    q = mixed[..., :2048].reshape(1, tokens, 16, 128)
    y, rstd = triton_ops.l2norm_fwd(q)
    dq = triton_ops.l2norm_bwd(y, rstd, torch.ones_like(y))
    core = mixed[..., 2048:4096].reshape(-1, 128)
    gate = torch.randn_like(core, requires_grad=True)
    weight = torch.ones(128, device=dev, dtype=dtype, requires_grad=True)
    out = triton_ops.rms_norm_gated(core, gate, weight, 1e-6)
    torch.autograd.backward([out, mixed[..., :2048]], [torch.ones_like(out), dq.reshape(1, tokens, 2048)])


def _compiled(kernel) -> int:
    device = torch.cuda.current_device()
    return len(kernel.device_caches[device][0]) if device in kernel.device_caches else 0


def test_one_compile_per_kernel_across_token_counts():
    for tokens in TOKEN_COUNTS:
        _step(tokens)
    torch.cuda.synchronize()
    kernels = [
        conv_kernels().causal_conv1d_silu_fwd_kernel,
        conv_kernels().causal_conv1d_silu_bwd_kernel,
        l2norm_kernels().l2norm_fwd_kernel,
        l2norm_kernels().l2norm_bwd_kernel,
        norm_kernels().rms_norm_gated_fwd_kernel,
        norm_kernels().rms_norm_gated_bwd_kernel,
    ]
    assert {k.__name__: _compiled(k) for k in kernels} == {k.__name__: 1 for k in kernels}


def test_launch_path_never_syncs_with_the_host():
    _step(300)  # compile outside the guarded region
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        _step(4099)
    finally:
        torch.cuda.set_sync_debug_mode("default")
