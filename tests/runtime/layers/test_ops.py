"""layers/ops.shared_input_linears against plain F.linear calls, in float64 on the CPU."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from slime_flashqla.layers.ops import shared_input_linears


def weights(*rows: int, hidden: int = 6) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return [torch.randn(n, hidden, generator=gen, dtype=torch.float64, requires_grad=True) for n in rows]


def grads_of(x, ws, fn, used):
    outs = fn(x, *ws)
    loss = sum((out * (i + 1)).square().sum() for i, out in enumerate(outs) if i in used)
    return torch.autograd.grad(loss, [x, *ws], allow_unused=True)


@pytest.mark.parametrize("used", [(0, 1, 2), (0, 2), (1,)])
def test_gradients_match_separate_linears(used):
    """Every output's and input's gradient, outputs that get no gradient included."""
    x = torch.randn(2, 5, 6, dtype=torch.float64, requires_grad=True)
    ws = weights(4, 3, 2)
    ours = grads_of(x, ws, shared_input_linears, used)
    plain = grads_of(x, ws, lambda x, *ws: [F.linear(x, w) for w in ws], used)
    for a, b in zip(ours, plain, strict=True):
        if b is None:
            assert a is None or not a.any()
        else:
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_frozen_input_and_weight_get_no_gradient():
    x = torch.randn(1, 3, 6, dtype=torch.float64)
    ws = weights(4, 2)
    ws[1].requires_grad_(False)
    outs = shared_input_linears(x, *ws)
    sum(out.sum() for out in outs).backward()
    assert ws[0].grad is not None and ws[1].grad is None
    torch.testing.assert_close(ws[0].grad, torch.ones(1, 3, 4, dtype=torch.float64).flatten(0, 1).t() @ x.view(3, 6))


def test_outputs_equal_linears_without_grad_and_under_autocast():
    x = torch.randn(2, 3, 6)
    ws = [w.detach().float() for w in weights(4, 2)]
    with torch.no_grad():
        for a, w in zip(shared_input_linears(x, *ws), ws, strict=True):
            torch.testing.assert_close(a, F.linear(x, w))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        outs = shared_input_linears(x.requires_grad_(), *ws)
        assert all(out.dtype == torch.bfloat16 for out in outs)
