"""short_conv_silu: the GDN layers' conv read in place from Qwen3-Next's and Qwen3.5's projection layouts.

The reference gathers q, k and v out of the projection by index arithmetic written here from
the checkpoints' layout (not from ProjectionLayout), convolves them in float64 and splits. With a
row index (context parallelism's received buffer) the reference first takes the projection's
rows in token order by plain indexing, and autograd scatters its gradient back.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from slime_flashqla.layers.context_parallel import zigzag_layout
from slime_flashqla.triton_ops import ProjectionLayout, short_conv_silu
from slime_flashqla.triton_ops.causal_conv1d import short_conv_silu_reference

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


def run(layout: ProjectionLayout, dtype, lengths, seed: int, rows=None, width: int = 4):
    """short_conv_silu (with `rows`: token t at proj's row rows[t]) against the float64 reference, both passes."""
    gen = generator(seed)
    t = sum(lengths) if lengths else 37
    batch = 1 if lengths else 2
    proj = randn(batch, t, layout.width, dtype=dtype, gen=gen, device=DEVICE)
    weight = randn(layout.channels, 1, width, dtype=dtype, gen=gen, device=DEVICE, scale=width**-0.5)
    cu = cu_seqlens_of(lengths, device=DEVICE) if lengths else None
    grads = [randn(batch, t, n, dtype=dtype, gen=gen, device=DEVICE) for n in layout.section_widths]
    dz = randn(batch, t, layout.groups, layout.z_width, dtype=dtype, gen=gen, device=DEVICE)

    pl, wl = proj.detach().clone().requires_grad_(), weight.detach().clone().requires_grad_()
    outputs = short_conv_silu(pl, wl, cu, layout, rows)
    assert len(outputs) == 3 + bool(layout.z_width)
    for out, n in zip(outputs[:3], layout.section_widths, strict=True):
        assert out.shape == (batch, t, n) and out.is_contiguous() and out.dtype == dtype
    loss = sum((out.float() * g.float()).sum() for out, g in zip(outputs[:3], grads, strict=True))
    if layout.z_width:
        z = outputs[3]
        if rows is None:
            assert z.data_ptr() != 0 and z._base is not None, "z must be a view of the projection, not a copy"
        loss = loss + (z.float() * dz.float()).sum()
    loss.backward()

    conv_cols, z_cols = reference_columns(layout.groups, layout.q_width, layout.v_width, layout.z_width)
    p64, w64 = proj.detach().double().requires_grad_(), weight.detach().double().requires_grad_()
    ordered = p64 if rows is None else p64[:, rows.cpu()]  # token t's row, by plain indexing
    y64 = causal_conv1d_silu64(ordered[..., conv_cols], w64, lengths or None)
    ref = torch.split(y64, layout.section_widths, dim=-1)
    loss64 = sum((r * g.double()).sum() for r, g in zip(ref, grads, strict=True))
    if layout.z_width:
        z64 = ordered[..., z_cols].view(batch, t, layout.groups, layout.z_width)
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


def permutation(t: int, seed: int) -> torch.Tensor:
    return torch.randperm(t, generator=generator(seed)).to(DEVICE)


@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_rows_read_and_written_through_a_permutation(dtype, index_dtype):
    """Qwen3-Next's received-buffer layout (z holds b, a): token t read at row rows[t], dx written back there."""
    lengths = packed_lengths(generator(6), 4, 70)
    rows = permutation(sum(lengths), 7).to(index_dtype)
    run(ProjectionLayout(groups=2, q_width=16, v_width=32, z_width=4), dtype, lengths, seed=8, rows=rows)


@pytest.mark.parametrize("width", [2, 3, 8])
def test_rows_at_other_conv_widths(width):
    """W < 4 (the deferred dweight with fewer lags) and W = 8 (the per-tap loops) read through the index too."""
    lengths = packed_lengths(generator(9 + width), width, 45)
    rows = permutation(sum(lengths), 10 + width)
    run(ProjectionLayout(groups=1, q_width=16, v_width=32, z_width=8), torch.float32, lengths, 11, rows, width)


def test_rows_of_slime_s_zigzag_layout():
    """The index context parallelism passes: the zigzag layout's `natural` over 2 ranks, Qwen3.5's flat layout."""
    offsets = [0, 4, 8, 20, 96, 100, 128]  # sequences of 4 tokens (= 2 * CP, shorter than W + 1) and longer
    lengths = [b - a for a, b in itertools.pairwise(offsets)]
    rows = zigzag_layout(offsets, 2, DEVICE).natural
    run(ProjectionLayout(groups=1, q_width=32, v_width=64, z_width=8), torch.float32, lengths, seed=12, rows=rows)


def test_rows_without_grad_and_the_reference_agree():
    """The no-grad launch with rows, and the PyTorch reference the layers use off CUDA, give the same outputs."""
    gen = generator(13)
    layout = ProjectionLayout(groups=2, q_width=8, v_width=16, z_width=4)
    lengths = [1, 3, 17, 2, 9]
    proj = randn(1, sum(lengths), layout.width, dtype=torch.float32, gen=gen, device=DEVICE)
    weight = randn(layout.channels, 1, 4, dtype=torch.float32, gen=gen, device=DEVICE, scale=0.5)
    cu, rows = cu_seqlens_of(lengths, device=DEVICE), permutation(sum(lengths), 14)
    with torch.no_grad():
        ours = short_conv_silu(proj, weight, cu, layout, rows)
    reference = short_conv_silu_reference(proj.cpu(), weight.cpu(), cu.cpu(), layout, rows.cpu())
    for name, a, b in zip(("q", "k", "v", "z"), ours, reference, strict=True):
        torch.testing.assert_close(a.cpu(), b, rtol=1e-5, atol=1e-6, msg=name)


def test_rows_of_the_wrong_length_are_refused():
    layout = ProjectionLayout(groups=1, q_width=8, v_width=16)
    proj = torch.ones(1, 5, layout.width, device=DEVICE)
    with pytest.raises(ValueError, match="rows must be a 1-D int32/int64 tensor of T=5"):
        short_conv_silu(proj, torch.ones(layout.channels, 1, 4, device=DEVICE), None, layout, torch.arange(4))
