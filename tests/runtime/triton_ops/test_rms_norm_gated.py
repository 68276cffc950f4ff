"""rms_norm_gated against a float64 reference and against its PyTorch reference's rounding (beside the op)."""

from __future__ import annotations

import pytest
import torch

from slime_flashqla.triton_ops import rms_norm_gated
from slime_flashqla.triton_ops.rms_norm_gated import rms_norm_gated_reference

from .references import DTYPES, assert_parity, generator, randn, rms_norm_gated64

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _inputs(rows, d, dtype, weight_dtype, seed, gate_layout="contiguous"):
    gen = generator(seed)
    x = randn(rows, d, dtype=dtype, gen=gen, device=DEVICE)
    if gate_layout == "slice":  # z as a view into a wider projection, rows 2*d apart
        gate = randn(rows, 2 * d, dtype=dtype, gen=gen, device=DEVICE)[:, d:]
    else:
        gate = randn(rows, d, dtype=dtype, gen=gen, device=DEVICE)
    weight = randn(d, dtype=weight_dtype, gen=gen, device=DEVICE, scale=0.3, shift=1.0)
    dy = randn(rows, d, dtype=dtype, gen=gen, device=DEVICE)
    return x, gate, weight, dy


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    ("rows", "d", "gate_layout"),
    [(301, 128, "contiguous"), (77, 96, "slice"), (1, 128, "contiguous")],
    ids=["multi-program", "odd-d-strided-gate", "one-row"],
)
def test_forward_and_gradients_match_float64(dtype, rows, d, gate_layout):
    eps = 1e-6
    x, gate, weight, dy = _inputs(rows, d, dtype, dtype, seed=rows + d, gate_layout=gate_layout)
    leaves = [t.detach().clone().requires_grad_() for t in (x, gate, weight)]
    y = rms_norm_gated(*leaves, eps)
    assert y.dtype == dtype and y.shape == x.shape
    y.backward(dy)
    ref = [t.detach().double().requires_grad_() for t in (x, gate, weight)]
    y64 = rms_norm_gated64(*ref, eps)
    y64.backward(dy.double())
    assert_parity("y", y, y64, dtype)
    for name, ours, theirs in zip(("dx", "dgate", "dweight"), leaves, ref, strict=True):
        assert ours.grad.dtype == ours.dtype
        assert_parity(name, ours.grad, theirs.grad, dtype)


@pytest.mark.parametrize(
    ("dtype", "weight_dtype"),
    [(torch.bfloat16, torch.bfloat16), (torch.float16, torch.float16), (torch.bfloat16, torch.float32)],
)
def test_forward_rounds_where_the_torch_definition_rounds(dtype, weight_dtype):
    """Within one ulp of rms_norm_gated_reference, which rounds normed and weight * normed to x's dtype."""
    x, gate, weight, _ = _inputs(203, 128, dtype, weight_dtype, seed=7)
    ours = rms_norm_gated(x, gate, weight, 1e-6)
    theirs = rms_norm_gated_reference(x, gate, weight, 1e-6)
    assert ours.dtype == theirs.dtype
    ulp = torch.finfo(dtype).eps
    torch.testing.assert_close(ours.float(), theirs.float(), rtol=ulp, atol=ulp * 1e-2)
    # Most outputs are bit-identical: the roundings are the same, not merely close.
    assert (ours == theirs).float().mean().item() > 0.95


def test_no_autograd_node_without_grad():
    x, gate, weight, _ = _inputs(8, 128, torch.bfloat16, torch.bfloat16, seed=8)
    assert rms_norm_gated(x, gate, weight, 1e-6).grad_fn is None
    x.requires_grad_()
    with torch.no_grad():
        assert rms_norm_gated(x, gate, weight, 1e-6).grad_fn is None


def test_bad_input_is_a_clear_error():
    x, gate, weight, _ = _inputs(4, 128, torch.bfloat16, torch.bfloat16, seed=9)
    with pytest.raises(ValueError, match=r"gate .* must have x's shape"):
        rms_norm_gated(x, gate[:2], weight, 1e-6)
    with pytest.raises(ValueError, match="weight must be"):
        rms_norm_gated(x, gate, weight[:64], 1e-6)
    with pytest.raises(ValueError, match="float16, bfloat16 or float32"):
        rms_norm_gated(x.double(), gate, weight, 1e-6)
