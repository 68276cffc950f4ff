"""short_conv_silu: the GDN layers' conv read in place from Qwen3-Next's and Qwen3.5's projection layouts.

The reference gathers q, k and v out of the projection by index arithmetic written here from
the checkpoints' layout (not from ProjectionLayout), convolves them in float64 and splits.
"""

from __future__ import annotations

import pytest
import torch

from slime_flashqla.triton_ops import ProjectionLayout, short_conv_silu

from .references import assert_parity, causal_conv1d_silu64, cu_seqlens_of, generator, packed_lengths, randn

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def reference_columns(groups: int, q: int, v: int, z: int) -> tuple[list[int], list[int]]:
    """Projection columns of the conv's channels (all q, all k, all v) and of z, group by group."""
    stride = 2 * q + v + z
    qs = [g * stride + i for g in range(groups) for i in range(q)]
    ks = [g * stride + q + i for g in range(groups) for i in range(q)]
    vs = [g * stride + 2 * q + i for g in range(groups) for i in range(v)]
    zs = [g * stride + 2 * q + v + i for g in range(groups) for i in range(z)]
    return qs + ks + vs, zs


def run(layout: ProjectionLayout, dtype, lengths, seed: int):
    gen = generator(seed)
    t = sum(lengths) if lengths else 37
    batch = 1 if lengths else 2
    proj = randn(batch, t, layout.width, dtype=dtype, gen=gen, device=DEVICE)
    weight = randn(layout.channels, 1, 4, dtype=dtype, gen=gen, device=DEVICE, scale=0.5)
    cu = cu_seqlens_of(lengths, device=DEVICE) if lengths else None
    grads = [randn(batch, t, n, dtype=dtype, gen=gen, device=DEVICE) for n in layout.section_widths]
    dz = randn(batch, t, layout.groups, layout.z_width, dtype=dtype, gen=gen, device=DEVICE)

    pl, wl = proj.detach().clone().requires_grad_(), weight.detach().clone().requires_grad_()
    outputs = short_conv_silu(pl, wl, cu, layout)
    assert len(outputs) == 3 + bool(layout.z_width)
    for out, n in zip(outputs[:3], layout.section_widths, strict=True):
        assert out.shape == (batch, t, n) and out.is_contiguous() and out.dtype == dtype
    loss = sum((out.float() * g.float()).sum() for out, g in zip(outputs[:3], grads, strict=True))
    if layout.z_width:
        z = outputs[3]
        assert z.data_ptr() != 0 and z._base is not None, "z must be a view of the projection, not a copy"
        loss = loss + (z.float() * dz.float()).sum()
    loss.backward()

    conv_cols, z_cols = reference_columns(layout.groups, layout.q_width, layout.v_width, layout.z_width)
    p64, w64 = proj.detach().double().requires_grad_(), weight.detach().double().requires_grad_()
    y64 = causal_conv1d_silu64(p64[..., conv_cols], w64, lengths or None)
    ref = torch.split(y64, layout.section_widths, dim=-1)
    loss64 = sum((r * g.double()).sum() for r, g in zip(ref, grads, strict=True))
    if layout.z_width:
        z64 = p64[..., z_cols].view(batch, t, layout.groups, layout.z_width)
        torch.testing.assert_close(outputs[3].double(), z64, rtol=0, atol=0)
        loss64 = loss64 + (z64 * dz.double()).sum()
    loss64.backward()
    for name, out, r in zip("qkv", outputs, ref, strict=False):
        assert_parity(name, out, r, dtype)
    assert_parity("dproj", pl.grad, p64.grad, dtype)
    assert_parity("dweight", wl.grad, w64.grad, dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_qwen3_next_layout_per_key_head_with_z(dtype):
    """Two key heads of [q 16 | k 16 | v 32 | z 32]: every column read and every gradient written in place."""
    lengths = packed_lengths(generator(1), 4, 70)
    run(ProjectionLayout(groups=2, q_width=16, v_width=32, z_width=32), dtype, lengths, seed=2)


def test_qwen3_5_flat_layout():
    """[q all | k all | v all] (Qwen3.5's in_proj_qkv), one group, no z."""
    lengths = packed_lengths(generator(3), 4, 50)
    run(ProjectionLayout(groups=1, q_width=32, v_width=64), torch.bfloat16, lengths, seed=4)


def test_dense_batch_without_cu_seqlens():
    run(ProjectionLayout(groups=3, q_width=8, v_width=16, z_width=16), torch.float32, None, seed=5)


def test_block_size_divides_every_section():
    assert ProjectionLayout(16, 128, 256, 256).block_size(128) == 128
    assert ProjectionLayout(2, 16, 32, 32).block_size(128) == 16
    assert ProjectionLayout(2, 24, 48).block_size(128) == 8
    assert ProjectionLayout.plain(160).block_size(128) == 128


def test_a_projection_of_the_wrong_width_is_refused():
    layout = ProjectionLayout(groups=2, q_width=8, v_width=16, z_width=16)
    proj = torch.ones(1, 5, layout.width + 1, device=DEVICE)
    with pytest.raises(ValueError, match="columns but its layout describes"):
        short_conv_silu(proj, torch.ones(layout.channels, 1, 4, device=DEVICE), None, layout)


@pytest.mark.parametrize("spare", [1, 8])
def test_the_projection_s_gradient_can_leave_spare_columns_after_each_row(spare):
    """grad_spare_columns: the same gradient, its rows at least `spare` columns (and 16 bytes) wider in memory."""
    layout = ProjectionLayout(groups=2, q_width=16, v_width=32, z_width=32)
    gen = generator(7)
    lengths = packed_lengths(gen, 3, 40)
    proj = randn(1, sum(lengths), layout.width, dtype=torch.bfloat16, gen=gen, device=DEVICE)
    weight = randn(layout.channels, 1, 4, dtype=torch.bfloat16, gen=gen, device=DEVICE, scale=0.5)
    cu = cu_seqlens_of(lengths, device=DEVICE)
    seen = {}

    def gradient(columns):
        leaf = proj.clone().requires_grad_()
        seen_by_proj = leaf.view_as(leaf)  # not a leaf: its hook sees the op's own gradient tensor
        seen_by_proj.register_hook(lambda g: seen.__setitem__(columns, g))
        outputs = short_conv_silu(seen_by_proj, weight, cu, layout, grad_spare_columns=columns)
        sum((out.float() * (i + 1)).sum() for i, out in enumerate(outputs)).backward()
        return leaf.grad

    torch.testing.assert_close(gradient(spare), gradient(0), rtol=0, atol=0)
    assert seen[0].stride(1) == layout.width
    row = seen[spare].stride(1)
    assert row >= layout.width + spare and row * seen[spare].element_size() % 16 == 0
    with pytest.raises(ValueError, match="grad_spare_columns must be >= 0"):
        short_conv_silu(proj.clone().requires_grad_(), weight, cu, layout, grad_spare_columns=-1)
