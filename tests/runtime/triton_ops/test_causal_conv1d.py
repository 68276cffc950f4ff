"""causal_conv1d_silu against a float64 reference: packed sequences of every awkward length, all dtypes, W 2..4."""

from __future__ import annotations

import pytest
import torch

from slime_flashqla.triton_ops import causal_conv1d_silu
from slime_flashqla.triton_ops.causal_conv1d import causal_conv1d_silu_reference

from .references import DTYPES, assert_parity, causal_conv1d_silu64, cu_seqlens_of, generator, packed_lengths, randn

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# 160 channels: one full 128-channel block and a masked one. A 150-token sequence spans
# several forward (64) and backward (128-token) blocks.
D = 160
LONG = 150


def _run(x, weight, cu_seqlens, lengths, dy):
    dtype = x.dtype
    xl, wl = x.detach().clone().requires_grad_(), weight.detach().clone().requires_grad_()
    y = causal_conv1d_silu(xl, wl, cu_seqlens)
    assert y.dtype == dtype and y.shape == x.shape
    y.backward(dy)
    x64, w64 = x.detach().double().requires_grad_(), weight.detach().double().requires_grad_()
    y64 = causal_conv1d_silu64(x64, w64, lengths)
    y64.backward(dy.double())
    errors = {
        "y": assert_parity("y", y, y64, dtype),
        "dx": assert_parity("dx", xl.grad, x64.grad, dtype),
        "dweight": assert_parity("dweight", wl.grad, w64.grad, dtype),
    }
    assert wl.grad.shape == weight.shape and wl.grad.dtype == weight.dtype
    return errors


@pytest.mark.parametrize("width", [2, 3, 4])
@pytest.mark.parametrize("dtype", DTYPES)
def test_packed_sequences_restart_at_every_boundary(dtype, width):
    gen = generator(10 * width + DTYPES.index(dtype))
    lengths = packed_lengths(gen, width, LONG)
    t = sum(lengths)
    cu_seqlens = cu_seqlens_of(lengths, device=DEVICE)
    x = randn(1, t, D, dtype=dtype, gen=gen, device=DEVICE)
    weight = randn(D, 1, width, dtype=dtype, gen=gen, device=DEVICE, scale=width**-0.5)
    dy = randn(1, t, D, dtype=dtype, gen=gen, device=DEVICE)
    _run(x, weight, cu_seqlens, lengths, dy)


@pytest.mark.parametrize("width", [1, 8])
def test_widths_beyond_qwen_s_four(width):
    gen = generator(30 + width)
    lengths = packed_lengths(gen, width, 70)
    t = sum(lengths)
    x = randn(1, t, 130, dtype=torch.float32, gen=gen, device=DEVICE)
    weight = randn(130, 1, width, dtype=torch.float32, gen=gen, device=DEVICE, scale=0.5)
    dy = randn(1, t, 130, dtype=torch.float32, gen=gen, device=DEVICE)
    _run(x, weight, cu_seqlens_of(lengths, device=DEVICE), lengths, dy)


def test_int64_offsets_and_a_single_sequence():
    gen = generator(20)
    x = randn(1, 70, D, dtype=torch.bfloat16, gen=gen, device=DEVICE)
    weight = randn(D, 1, 4, dtype=torch.bfloat16, gen=gen, device=DEVICE, scale=0.5)
    dy = randn(1, 70, D, dtype=torch.bfloat16, gen=gen, device=DEVICE)
    _run(x, weight, cu_seqlens_of([70], dtype=torch.int64, device=DEVICE), [70], dy)


def test_batched_rows_and_a_strided_input():
    """B > 1 without cu_seqlens, x a channel slice of a wider tensor (as from a fused projection)."""
    gen = generator(21)
    x = randn(2, 45, 2 * D, dtype=torch.float16, gen=gen, device=DEVICE)[..., D:]
    assert not x.is_contiguous()
    weight = randn(D, 1, 4, dtype=torch.float16, gen=gen, device=DEVICE, scale=0.5)
    dy = randn(2, 45, D, dtype=torch.float16, gen=gen, device=DEVICE)
    _run(x, weight, None, None, dy)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_forward_rounds_where_the_torch_definition_rounds(dtype):
    """Within one ulp of causal_conv1d_silu_reference (conv output rounded before SiLU)."""
    gen = generator(22)
    lengths = packed_lengths(gen, 4, 90)
    cu_seqlens = cu_seqlens_of(lengths, device=DEVICE)
    x = randn(1, sum(lengths), D, dtype=dtype, gen=gen, device=DEVICE)
    weight = randn(D, 1, 4, dtype=dtype, gen=gen, device=DEVICE, scale=0.5)
    ours = causal_conv1d_silu(x, weight, cu_seqlens)
    theirs = causal_conv1d_silu_reference(x, weight, cu_seqlens)
    ulp = torch.finfo(dtype).eps
    torch.testing.assert_close(ours.float(), theirs.float(), rtol=ulp, atol=ulp * 1e-2)
    assert (ours == theirs).float().mean().item() > 0.95


def test_no_autograd_node_without_grad():
    gen = generator(23)
    x = randn(1, 9, D, dtype=torch.bfloat16, gen=gen, device=DEVICE)
    weight = randn(D, 1, 4, dtype=torch.bfloat16, gen=gen, device=DEVICE)
    assert causal_conv1d_silu(x, weight).grad_fn is None


def test_bad_input_is_a_clear_error():
    x = torch.ones(2, 8, 16, device=DEVICE)
    weight = torch.ones(16, 1, 4, device=DEVICE)
    cu = torch.tensor([0, 8], dtype=torch.int32, device=DEVICE)
    with pytest.raises(ValueError, match="B == 1"):
        causal_conv1d_silu(x, weight, cu)
    with pytest.raises(ValueError, match="weight has 8 channels"):
        causal_conv1d_silu(x, weight[:8])
    with pytest.raises(ValueError, match=r"\[D, 1, W\]"):
        causal_conv1d_silu(x, weight.reshape(16, 2, 2))
    with pytest.raises(ValueError, match="cu_seqlens must be a 1-D int32/int64"):
        causal_conv1d_silu(x[:1], weight, cu.float())
    with pytest.raises(ValueError, match=r"kernel width must be 1\.\.8"):
        causal_conv1d_silu(x, torch.ones(16, 1, 9, device=DEVICE))
    with pytest.raises(ValueError, match=r"x must be \[B, T, D\]"):
        causal_conv1d_silu(x[0], weight)
