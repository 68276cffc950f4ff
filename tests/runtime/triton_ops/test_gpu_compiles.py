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


def _inputs(tokens: int, dtype=torch.bfloat16) -> dict:
    """GDN-layer shapes at `tokens` tokens: conv over q/k/v of 16/32 heads of 128, three packed sequences."""
    dev = "cuda"
    lengths = [tokens] if tokens < 3 else [1, 2, tokens - 3]
    return {
        "cu": cu_seqlens_of(lengths, device=dev),
        "x": torch.randn(1, tokens, 3 * 2048, device=dev, dtype=dtype, requires_grad=True),
        "w": torch.randn(3 * 2048, 1, 4, device=dev, dtype=dtype, requires_grad=True),
        "gate": torch.randn(tokens * 16, 128, device=dev, dtype=dtype, requires_grad=True),
        "weight": torch.ones(128, device=dev, dtype=dtype, requires_grad=True),
    }


def _step(inp: dict) -> None:
    """One forward + backward of each op, the way the layer chains them."""
    tokens = inp["x"].shape[1]
    mixed = triton_ops.causal_conv1d_silu(inp["x"], inp["w"], inp["cu"])
    q = mixed[..., :2048].reshape(1, tokens, 16, 128)
    y, rstd = triton_ops.l2norm_fwd(q)
    dq = triton_ops.l2norm_bwd(y, rstd, torch.ones_like(y))
    core = mixed[..., 2048:4096].reshape(-1, 128)
    out = triton_ops.rms_norm_gated(core, inp["gate"], inp["weight"], 1e-6)
    torch.autograd.backward([out, mixed[..., :2048]], [torch.ones_like(out), dq.reshape(1, tokens, 2048)])


def _kernels():
    return [
        conv_kernels().causal_conv1d_silu_fwd_kernel,
        conv_kernels().causal_conv1d_silu_bwd_kernel,
        l2norm_kernels().l2norm_fwd_kernel,
        l2norm_kernels().l2norm_bwd_kernel,
        norm_kernels().rms_norm_gated_fwd_kernel,
        norm_kernels().rms_norm_gated_bwd_kernel,
    ]


def _compiled() -> dict[str, int]:
    """How many specialisations of each kernel this process has compiled on the current device."""
    device = torch.cuda.current_device()
    return {k.__name__: len(k.device_caches[device][0]) if device in k.device_caches else 0 for k in _kernels()}


def test_one_compile_per_kernel_across_token_counts():
    # Other tests in this process compile other dtypes and sizes: count what these steps add.
    _step(_inputs(TOKEN_COUNTS[0]))
    after_first = _compiled()
    assert all(after_first.values()), after_first
    for tokens in TOKEN_COUNTS[1:]:
        _step(_inputs(tokens))
    torch.cuda.synchronize()
    assert _compiled() == after_first


def test_launch_path_never_syncs_with_the_host():
    _step(_inputs(300))  # compile outside the guarded region
    inp = _inputs(4099)  # cu_seqlens' host-to-device copy syncs: made before the guard
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        _step(inp)
    finally:
        torch.cuda.set_sync_debug_mode("default")
