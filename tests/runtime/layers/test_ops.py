"""layers/ops.shared_input_linears against plain F.linear calls, in float64 on the CPU (folded gradients included)."""

from __future__ import annotations

from typing import ClassVar

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


class _WithSpareColumns(torch.autograd.Function):
    """Identity whose backward hands on the gradient as the first columns of a wider buffer, as the short conv's."""

    spare = 3
    buffers: ClassVar[list[torch.Tensor]] = []

    @staticmethod
    def forward(ctx, y):
        return y.view_as(y)

    @staticmethod
    def backward(ctx, grad):
        wide = torch.full((*grad.shape[:-1], grad.shape[-1] + _WithSpareColumns.spare), float("nan"), dtype=grad.dtype)
        wide[..., : grad.shape[-1]] = grad
        _WithSpareColumns.buffers.append(wide)
        return wide[..., : grad.shape[-1]]


def folded_linears(x, *ws, folded=1):
    outs = list(shared_input_linears(x, *ws, folded=folded))
    outs[0] = _WithSpareColumns.apply(outs[0])
    return outs


@pytest.mark.parametrize(("rows", "folded"), [((4, 3, 2), 1), ((5, 1, 2), 2)])
def test_gradients_folded_into_the_first_s_spare_columns_match_separate_linears(rows, folded):
    """The last `folded` gradients written into the first's spare columns: one GEMM each, the same gradients."""
    x = torch.randn(2, 5, 6, dtype=torch.float64, requires_grad=True)
    ws = weights(*rows)
    _WithSpareColumns.buffers.clear()
    ours = grads_of(x, ws, lambda x, *ws: folded_linears(x, *ws, folded=folded), range(len(rows)))
    plain = grads_of(x, ws, lambda x, *ws: [F.linear(x, w) for w in ws], range(len(rows)))
    for a, b in zip(ours, plain, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    (buffer,) = _WithSpareColumns.buffers
    narrow = sum(rows[len(rows) - folded :])
    assert not buffer[..., rows[0] : rows[0] + narrow].isnan().any(), "the folded gradients were not written there"


def test_too_few_spare_columns_or_a_missing_gradient_fall_back_to_separate_gemms():
    x = torch.randn(1, 4, 6, dtype=torch.float64, requires_grad=True)
    ws = weights(4, 5)  # 5 folded columns, 3 spare
    _WithSpareColumns.buffers.clear()
    ours = grads_of(x, ws, folded_linears, (0, 1))
    plain = grads_of(x, ws, lambda x, *ws: [F.linear(x, w) for w in ws], (0, 1))
    for a, b in zip(ours, plain, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    assert _WithSpareColumns.buffers[0][..., 4:].isnan().all(), "nothing may be written past a gradient too narrow"
    ours = grads_of(x, ws, folded_linears, (0,))
    plain = grads_of(x, ws, lambda x, *ws: [F.linear(x, w) for w in ws], (0,))
    torch.testing.assert_close(ours[0], plain[0], rtol=1e-12, atol=1e-12)


def test_folded_out_of_range_is_refused():
    x = torch.randn(1, 2, 6, requires_grad=True)
    with pytest.raises(ValueError, match=r"folded must be 0\.\.1"):
        shared_input_linears(x, *weights(4, 2), folded=2)


def test_a_frozen_folded_weight_gets_no_gradient_and_the_others_theirs():
    x = torch.randn(1, 4, 6, dtype=torch.float64, requires_grad=True)
    ws = weights(4, 2)
    ws[1].requires_grad_(False)
    _WithSpareColumns.buffers.clear()
    outs = folded_linears(x, *ws)
    sum((out * (i + 1)).square().sum() for i, out in enumerate(outs)).backward()
    assert ws[1].grad is None
    assert not _WithSpareColumns.buffers[0][..., 4:6].isnan().any(), "the frozen weight's gradient still folds"
    x2 = x.detach().requires_grad_()
    loss = sum((F.linear(x2, w) * (i + 1)).square().sum() for i, w in enumerate(ws))
    plain = torch.autograd.grad(loss, [x2, ws[0]])
    torch.testing.assert_close(x.grad, plain[0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(ws[0].grad, plain[1], rtol=1e-12, atol=1e-12)
