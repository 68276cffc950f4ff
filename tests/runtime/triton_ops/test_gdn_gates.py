"""gdn_gates: beta and g, and every gradient, against the layers' torch definition computed in float64."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from slime_flashqla.triton_ops import gdn_gates

from .references import assert_parity, generator, randn

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def reference(a, b, A_log, dt_bias):
    """slime's and Hugging Face's gates, beta = sigmoid(b), g = -exp(A_log) * softplus(a + dt_bias)."""
    return -A_log.exp() * F.softplus(a + dt_bias), b.sigmoid()


@pytest.mark.parametrize("fused", [True, False], ids=["fused-ba-view", "separate"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_values_and_gradients(dtype, fused):
    gen = generator(7 + fused)
    t, hk, group = 75, 3, 4
    heads = hk * group
    if fused:  # Qwen3-Next's in_proj_ba output: [b (group), a (group)] per key head, read in place
        ba = randn(1, t, hk, 2 * group, dtype=dtype, gen=gen, device=DEVICE, scale=3.0)
        b, a = ba[..., :group], ba[..., group:]
    else:
        b = randn(1, t, heads, dtype=dtype, gen=gen, device=DEVICE, scale=3.0)
        a = randn(1, t, heads, dtype=dtype, gen=gen, device=DEVICE, scale=3.0)
    # a + dt_bias above softplus's threshold of 20 in some heads, far below 0 in others.
    dt_bias = randn(heads, dtype=dtype, gen=gen, device=DEVICE, scale=8.0)
    A_log = randn(heads, dtype=dtype, gen=gen, device=DEVICE)
    dg = randn(1, t, heads, dtype=torch.float32, gen=gen, device=DEVICE)
    dbeta = randn(1, t, heads, dtype=dtype, gen=gen, device=DEVICE)

    leaves = [x.detach().clone().requires_grad_() for x in (a, b, A_log, dt_bias)]
    g, beta = gdn_gates(*leaves)
    assert g.dtype == torch.float32 and beta.dtype == dtype and g.shape == beta.shape == (1, t, heads)
    ((g * dg).sum() + (beta.float() * dbeta.float()).sum()).backward()

    refs = [x.detach().double().reshape(1, t, -1) if x.dim() > 1 else x.detach().double() for x in (a, b)]
    leaves64 = [r.requires_grad_() for r in refs] + [x.detach().double().requires_grad_() for x in (A_log, dt_bias)]
    g64, beta64 = reference(*leaves64)
    ((g64 * dg.double()).sum() + (beta64 * dbeta.double()).sum()).backward()
    assert_parity("g", g, g64, torch.float32 if dtype == torch.float32 else torch.bfloat16)
    assert_parity("beta", beta, beta64, dtype)
    for name, ours, ref in zip(("da", "db", "dA_log", "ddt_bias"), leaves, leaves64, strict=True):
        assert ours.grad.shape == ours.shape and ours.grad.dtype == ours.dtype
        assert_parity(name, ours.grad.reshape(ref.grad.shape), ref.grad, dtype)


def test_no_autograd_node_without_grad():
    gen = generator(9)
    a, b = (randn(1, 5, 4, dtype=torch.bfloat16, gen=gen, device=DEVICE) for _ in range(2))
    A_log, dt_bias = (randn(4, dtype=torch.bfloat16, gen=gen, device=DEVICE) for _ in range(2))
    g, beta = gdn_gates(a, b, A_log, dt_bias)
    assert g.grad_fn is None and beta.grad_fn is None


def test_bad_shapes_are_one_line_errors():
    a = torch.ones(1, 5, 4, device=DEVICE)
    with pytest.raises(ValueError, match="must have one shape"):
        gdn_gates(a, a[..., :3], torch.ones(4, device=DEVICE), torch.ones(4, device=DEVICE))
    with pytest.raises(ValueError, match=r"A_log and dt_bias must be \[4\]"):
        gdn_gates(a, a, torch.ones(3, device=DEVICE), torch.ones(4, device=DEVICE))
