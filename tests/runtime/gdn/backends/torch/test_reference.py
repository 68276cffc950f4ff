"""The `torch` backend against the independent per-token recurrence in float64."""

from __future__ import annotations

import pytest
import torch

from helpers.gdn_inputs import call_gdn, make_inputs
from helpers.gdn_recurrence import recurrent_gated_delta_rule
from slime_flashqla.gdn import get_chunk_gated_delta_rule
from slime_flashqla.gdn.backends.torch.reference import chunk_gated_delta_rule_torch


def rel(actual, expected):
    return ((actual.double() - expected).norm() / expected.norm()).item()


def run_both(inputs, *, l2=True, scale=None, **kwargs):
    fn = get_chunk_gated_delta_rule("torch")
    o, ht = call_gdn(fn, inputs, scale=scale, output_final_state=True, use_qk_l2norm_in_kernel=l2, **kwargs)
    ro, rht = recurrent_gated_delta_rule(
        inputs["q"],
        inputs["k"],
        inputs["v"],
        inputs["g"],
        inputs["beta"],
        scale=scale,
        initial_state=inputs["initial_state"],
        use_qk_l2norm=l2,
        cu_seqlens=inputs["cu_seqlens"],
    )
    return o, ht, ro, rht


@pytest.mark.parametrize(("key_heads", "value_heads"), [(2, 2), (2, 4), (1, 4)])
@pytest.mark.parametrize("varlen", [True, False])
@pytest.mark.parametrize("initial_state", [True, False])
def test_matches_recurrence_float32(key_heads, value_heads, varlen, initial_state):
    # lengths 37 + 91 cross the 64-token chunk boundary at an odd offset.
    inputs = make_inputs(
        lengths=(37, 91), key_heads=key_heads, value_heads=value_heads, varlen=varlen, initial_state=initial_state
    )
    o, ht, ro, rht = run_both(inputs)
    assert o.dtype == torch.float32
    # float32 arithmetic against float64: errors land near 1e-7..1e-6.
    assert rel(o, ro) < 1e-5
    assert rel(ht, rht) < 1e-5


def test_dense_batch_of_two_keeps_sequences_apart():
    inputs = make_inputs(batch=2, lengths=(70,), varlen=False)
    o, ht, ro, rht = run_both(inputs)
    assert ht.shape == (2, 4, 16, 8)
    assert rel(o, ro) < 1e-5
    assert rel(ht, rht) < 1e-5


def test_float64_is_exact_to_float64_rounding():
    inputs = make_inputs(lengths=(20, 45, 3), dtype=torch.float64)
    o, ht, ro, rht = run_both(inputs, l2=False, scale=0.3)
    assert rel(o, ro) < 1e-12
    assert rel(ht, rht) < 1e-12


def test_without_l2norm_and_custom_scale():
    inputs = make_inputs(lengths=(50,))
    o, _, ro, _ = run_both(inputs, l2=False, scale=0.05)
    assert rel(o, ro) < 1e-5


def test_default_scale_is_key_dim_to_minus_half():
    inputs = make_inputs(lengths=(30,))
    o_default, *_ = run_both(inputs)
    o_explicit, *_ = run_both(inputs, scale=16**-0.5)
    torch.testing.assert_close(o_default, o_explicit, rtol=0, atol=0)


def test_empty_sequence_passes_its_state_through():
    inputs = make_inputs(lengths=(12, 0, 30))
    o, ht, ro, rht = run_both(inputs)
    torch.testing.assert_close(ht[1], inputs["initial_state"][1], rtol=0, atol=0)
    assert rel(o, ro) < 1e-5
    assert rel(ht, rht) < 1e-5


@pytest.mark.parametrize("chunk_size", [1, 7, 64, 200])
def test_chunk_size_does_not_change_the_result(chunk_size):
    inputs = make_inputs(lengths=(37, 91))
    args = (inputs["q"], inputs["k"], inputs["v"])
    kwargs = dict(
        g=inputs["g"],
        beta=inputs["beta"],
        initial_state=inputs["initial_state"],
        output_final_state=True,
        cu_seqlens=inputs["cu_seqlens"],
    )
    o, ht = chunk_gated_delta_rule_torch(*args, chunk_size=chunk_size, **kwargs)
    ro, rht = recurrent_gated_delta_rule(*args, inputs["g"], inputs["beta"], **_rec(inputs))
    assert rel(o, ro) < 1e-5
    assert rel(ht, rht) < 1e-5


def _rec(inputs):
    return {"initial_state": inputs["initial_state"], "cu_seqlens": inputs["cu_seqlens"]}


def test_half_precision_inputs_return_their_dtype():
    inputs = make_inputs(lengths=(40,), dtype=torch.bfloat16)
    o, ht, ro, _ = run_both(inputs)
    assert o.dtype == torch.bfloat16
    assert ht.dtype == torch.float32
    assert rel(o, ro) < 1e-2  # bf16 output rounding


def test_gradients_match_finite_differences():
    """gradcheck: autograd's gradients of every input equal numerical derivatives (float64)."""
    inputs = make_inputs(lengths=(5, 6), key_heads=1, value_heads=2, key_dim=3, value_dim=2, dtype=torch.float64)
    leaves = [inputs[k].double().requires_grad_() for k in ("q", "k", "v", "g", "beta", "initial_state")]
    cu = inputs["cu_seqlens"]
    fn = get_chunk_gated_delta_rule("torch")

    def f(q, k, v, g, beta, h0):
        o, ht = fn(
            q,
            k,
            v,
            g=g,
            beta=beta,
            initial_state=h0,
            output_final_state=True,
            use_qk_l2norm_in_kernel=True,
            cu_seqlens=cu,
        )
        return o, ht

    assert torch.autograd.gradcheck(f, leaves, eps=1e-6, atol=1e-5)


def test_gradients_cross_chunks_like_the_recurrence():
    """d(sum o)/dv of the chunked form equals the float64 gradient of an autograd-friendly recurrence."""
    inputs = make_inputs(lengths=(70,), key_heads=1, value_heads=2, dtype=torch.float64)
    v = inputs["v"].clone().requires_grad_()
    o, _ = chunk_gated_delta_rule_torch(
        inputs["q"], inputs["k"], v, g=inputs["g"], beta=inputs["beta"], initial_state=inputs["initial_state"]
    )
    (o * torch.linspace(-1, 1, o.numel(), dtype=o.dtype).view_as(o)).sum().backward()
    chunked_grad = v.grad.clone()
    v.grad = None
    o_small, _ = chunk_gated_delta_rule_torch(
        inputs["q"],
        inputs["k"],
        v,
        g=inputs["g"],
        beta=inputs["beta"],
        initial_state=inputs["initial_state"],
        chunk_size=1,
    )
    (o_small * torch.linspace(-1, 1, o.numel(), dtype=o.dtype).view_as(o)).sum().backward()
    torch.testing.assert_close(chunked_grad, v.grad, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("closed", [(4,), (0,), (63, 64), (4, 5, 100)], ids=str)
def test_a_closed_gate_resets_the_state_like_the_recurrence(closed):
    """g = -inf (a closed gate) resets the state as the recurrence does, never NaN from -inf - -inf (issue 25 D22)."""
    inputs = make_inputs(lengths=(37, 91))
    for t in closed:
        inputs["g"][0, t, 1] = float("-inf")
    o, ht, ro, rht = run_both(inputs)
    assert torch.isfinite(o).all() and torch.isfinite(ht).all()
    assert torch.isfinite(ro).all()  # the premise: the recurrence itself stays finite
    assert rel(o, ro) < 1e-5 and rel(ht, rht) < 1e-5


def test_gradients_through_a_closed_gate_are_finite():
    inputs = make_inputs(lengths=(70,), requires_grad=True)
    with torch.no_grad():
        inputs["g"][0, 10, 0] = float("-inf")
    o, ht = chunk_gated_delta_rule_torch(
        inputs["q"], inputs["k"], inputs["v"], g=inputs["g"], beta=inputs["beta"],
        initial_state=inputs["initial_state"], output_final_state=True, cu_seqlens=inputs["cu_seqlens"],
    )  # fmt: skip
    (o.square().sum() + ht.square().sum()).backward()
    for name in ("q", "k", "v", "g", "beta", "initial_state"):
        assert torch.isfinite(inputs[name].grad).all(), name
    assert inputs["g"].grad[0, 10, 0] == 0  # nothing flows through a gate that is shut
