"""l2norm_fwd/l2norm_bwd against a float64 reference, in FLA's host-function contract."""

from __future__ import annotations

import pytest
import torch

from slime_flashqla.triton_ops import l2norm_bwd, l2norm_fwd

from .references import DTYPES, assert_parity, generator, l2norm64, randn

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _check(x: torch.Tensor, eps: float, gen: torch.Generator) -> None:
    dtype = x.dtype
    y, rstd = l2norm_fwd(x, eps)
    assert y.dtype == dtype and y.shape == x.shape
    assert rstd.dtype == torch.float32 and rstd.shape == x.shape[:-1]
    x64 = x.detach().double().requires_grad_()
    y64 = l2norm64(x64, eps)
    assert_parity("y", y, y64, dtype)
    assert_parity("rstd", rstd, 1 / torch.sqrt((x64.detach() ** 2).sum(-1) + eps), torch.float32)
    dy = randn(*x.shape, dtype=dtype, gen=gen, device=x.device)
    (dx64,) = torch.autograd.grad(y64, x64, dy.double())
    dx = l2norm_bwd(y, rstd, dy, eps)
    assert dx.dtype == dtype and dx.shape == x.shape
    assert_parity("dx", dx, dx64, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_q_k_heads_read_in_place_from_the_conv_output(dtype):
    """q and k as the GDN layer makes them: [1, T, H, 128] slices of the conv output, not contiguous."""
    gen = generator(1)
    t, h, d = 53, 4, 128
    mixed = randn(1, t, 3 * h * d, dtype=dtype, gen=gen, device=DEVICE)
    q, k = (part.reshape(1, t, h, d) for part in torch.split(mixed, [h * d, h * d, h * d], dim=-1)[:2])
    assert not q.is_contiguous()
    _check(q, 1e-6, gen)
    _check(k, 1e-6, gen)


@pytest.mark.parametrize(
    ("shape", "d"),
    [((37,), 64), ((2, 19, 3), 128), ((5, 2, 7, 3), 96), ((), 512)],
    ids=["2d", "4d", "5d-odd-d", "one-row-d512"],
)
def test_shapes_and_feature_dims(shape, d):
    gen = generator(2)
    _check(randn(*shape, d, dtype=torch.bfloat16, gen=gen, device=DEVICE), 1e-6, gen)


def test_layouts_two_strides_cannot_describe_are_copied_not_misread():
    gen = generator(3)
    x = randn(6, 5, 4, 32, dtype=torch.float32, gen=gen, device=DEVICE).transpose(0, 1)  # outer dims not collapsible
    _check(x, 1e-6, gen)


def test_eps_is_applied():
    gen = generator(4)
    x = randn(40, 16, dtype=torch.float32, gen=gen, device=DEVICE, scale=1e-2)
    _check(x, 1e-2, gen)  # eps comparable to |x|^2: a kernel ignoring eps would miss by ~50%


def test_empty_input():
    y, rstd = l2norm_fwd(torch.empty(0, 4, 128, device=DEVICE))
    assert y.shape == (0, 4, 128) and rstd.shape == (0, 4)


def test_bad_input_is_a_clear_error():
    with pytest.raises(ValueError, match="float16, bfloat16 or float32"):
        l2norm_fwd(torch.ones(3, 8, dtype=torch.float64, device=DEVICE))
    with pytest.raises(ValueError, match="last dim must be"):
        l2norm_fwd(torch.ones(3, 8192, device=DEVICE))
    y, rstd = l2norm_fwd(torch.ones(3, 8, device=DEVICE))
    with pytest.raises(ValueError, match="rstd"):
        l2norm_bwd(y, rstd.double(), y)
    with pytest.raises(ValueError, match="must match"):
        l2norm_bwd(y, rstd, y[:2])
