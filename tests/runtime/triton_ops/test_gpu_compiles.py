"""On a GPU: one compile per (dtype, D, W) whatever the token count, and no host sync on the launch path."""

from __future__ import annotations

import pytest
import torch

from slime_flashqla import triton_ops
from slime_flashqla.triton_ops.causal_conv1d import _kernels as conv_kernels
from slime_flashqla.triton_ops.gdn_gates import _kernels as gates_kernels
from slime_flashqla.triton_ops.l2norm import _kernels as l2norm_kernels
from slime_flashqla.triton_ops.rms_norm_gated import _kernels as norm_kernels

from .references import cu_seqlens_of

pytestmark = pytest.mark.gpu
TOKEN_COUNTS = (1, 17, 4096, 5003, 70000)


# Qwen3-Next's fused projection at 16/32 heads of 128: [q, k, v (2 heads), z (2 heads)] per key head.
LAYOUT = triton_ops.ProjectionLayout(16, 128, 256, 256)


def _inputs(tokens: int, dtype=torch.bfloat16) -> dict:
    """GDN-layer shapes at `tokens` tokens: 16/32 heads of 128, three packed sequences."""
    dev = "cuda"
    lengths = [tokens] if tokens < 3 else [1, 2, tokens - 3]
    return {
        "cu": cu_seqlens_of(lengths, device=dev),
        "proj": torch.randn(1, tokens, LAYOUT.width, device=dev, dtype=dtype, requires_grad=True),
        "ba": torch.randn(1, tokens, 16, 4, device=dev, dtype=dtype, requires_grad=True),
        "w": torch.randn(LAYOUT.channels, 1, 4, device=dev, dtype=dtype, requires_grad=True),
        "A_log": torch.randn(32, device=dev, dtype=dtype, requires_grad=True),
        "dt_bias": torch.randn(32, device=dev, dtype=dtype, requires_grad=True),
        "weight": torch.ones(128, device=dev, dtype=dtype, requires_grad=True),
    }


def _step(inp: dict) -> None:
    """One forward + backward of each op, the way the layer chains them."""
    tokens = inp["proj"].shape[1]
    q, _, v, z = triton_ops.short_conv_silu(inp["proj"], inp["w"], inp["cu"], LAYOUT)
    g, beta = triton_ops.gdn_gates(inp["ba"][..., 2:], inp["ba"][..., :2], inp["A_log"], inp["dt_bias"])
    y, rstd = triton_ops.l2norm_fwd(q.view(1, tokens, 16, 128))
    dq = triton_ops.l2norm_bwd(y, rstd, torch.ones_like(y))
    rows = (tokens * 16, 2, 128)
    out = triton_ops.rms_norm_gated(v.view(rows), z.view(rows), inp["weight"], 1e-6)
    grads = [torch.ones_like(out), dq.reshape(1, tokens, 2048), torch.ones_like(g), torch.ones_like(beta)]
    torch.autograd.backward([out, q, g, beta], grads)


def _kernels():
    return [
        conv_kernels().short_conv_fwd_kernel,
        conv_kernels().short_conv_bwd_dpre_kernel,
        conv_kernels().short_conv_bwd_dx_kernel,
        gates_kernels().gdn_gates_fwd_kernel,
        gates_kernels().gdn_gates_bwd_kernel,
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
