"""No tokens (T = 0, or B = 0): every backend returns empty outputs of the right shape, no kernel runs."""

from __future__ import annotations

import pytest
import torch

from helpers.gdn_inputs import call_gdn, make_inputs
from slime_flashqla.gdn import check_inputs, get_chunk_gated_delta_rule
from slime_flashqla.gdn.api import _launch
from slime_flashqla.gdn.backends import KERNEL_BACKENDS
from slime_flashqla.gdn.backends.torch.reference import chunk_gated_delta_rule_torch

HK, HV, K, V = 2, 4, 16, 8


def empty_inputs(case, *, initial_state=True, requires_grad=False):
    """Inputs with no tokens: dense T = 0 (B = 2), dense B = 0 (T = 5), or packed cu_seqlens [0, 0, 0]."""
    if case == "packed":
        inputs = make_inputs(lengths=(0, 0), initial_state=initial_state, requires_grad=requires_grad)
    else:
        batch, tokens = (2, 0) if case == "T=0" else (0, 5)
        inputs = make_inputs(batch=2, lengths=(5,), varlen=False, initial_state=initial_state)
        for name in ("q", "k", "v", "g", "beta"):
            inputs[name] = inputs[name][:batch, :tokens].detach().clone().requires_grad_(requires_grad)
        if initial_state:
            inputs["initial_state"] = inputs["initial_state"][:batch].detach().clone().requires_grad_(requires_grad)
    return inputs


def expected_sizes(case):
    batch, tokens, states = {"T=0": (2, 0, 2), "B=0": (0, 5, 0), "packed": (1, 0, 2)}[case]
    return (batch, tokens, HV, V), (states, HV, K, V)


def call(fn, inputs, output_final_state=True):
    return call_gdn(fn, inputs, output_final_state=output_final_state)


CASES = ["T=0", "B=0", "packed"]


@pytest.mark.parametrize("backend", ["torch", "auto"])
@pytest.mark.parametrize("case", CASES)
def test_empty_outputs_keep_the_state(backend, case):
    inputs = empty_inputs(case)
    o, final = call(get_chunk_gated_delta_rule(backend), inputs)
    o_size, state_size = expected_sizes(case)
    assert tuple(o.shape) == o_size and o.dtype == inputs["v"].dtype
    assert tuple(final.shape) == state_size and final.dtype == torch.float32
    torch.testing.assert_close(final, inputs["initial_state"], rtol=0, atol=0)  # no token changes the state
    if final.numel():
        assert final.data_ptr() != inputs["initial_state"].data_ptr()  # a copy: editing one leaves the other


@pytest.mark.parametrize("backend", ["torch", "auto"])
@pytest.mark.parametrize("case", CASES)
def test_empty_outputs_without_initial_state(backend, case):
    inputs = empty_inputs(case, initial_state=False)
    o, final = call(get_chunk_gated_delta_rule(backend), inputs)
    o_size, state_size = expected_sizes(case)
    assert tuple(o.shape) == o_size
    assert tuple(final.shape) == state_size and not final.any()
    assert call(get_chunk_gated_delta_rule(backend), inputs, output_final_state=False)[1] is None


@pytest.mark.parametrize("case", ["T=0", "packed"])
def test_backward_through_an_empty_micro_batch_runs(case):
    inputs = empty_inputs(case, requires_grad=True)
    o, final = call(get_chunk_gated_delta_rule("torch"), inputs)
    (o.sum() + final.sum()).backward()
    assert inputs["v"].grad is not None and inputs["v"].grad.shape == inputs["v"].shape
    torch.testing.assert_close(inputs["initial_state"].grad, torch.ones_like(inputs["initial_state"]))


@pytest.mark.parametrize("name", list(KERNEL_BACKENDS))
@pytest.mark.parametrize("case", CASES)
def test_no_backend_asks_for_its_kernel_without_tokens(monkeypatch, name, case):
    """The shared launch path every backend (and auto's choice) runs: FLA's and FlashQLA's kernels are
    not written for an empty grid, so it must return before asking the backend for its kernel."""

    def no_kernel():
        raise AssertionError(f"{name}'s kernel was asked for with no tokens")

    monkeypatch.setattr(KERNEL_BACKENDS[name], "kernel", no_kernel)
    inputs = empty_inputs(case)
    tensors = [inputs[n] for n in ("q", "k", "v", "g", "beta")]
    state = inputs["initial_state"]
    shape = check_inputs(*tensors, None, state, inputs["cu_seqlens"])
    o, final = _launch(
        KERNEL_BACKENDS[name],
        shape,
        *tensors,
        initial_state=state,
        output_final_state=True,
        cu_seqlens=shape.cu_seqlens,
    )
    o_size, state_size = expected_sizes(case)
    assert tuple(o.shape) == o_size and tuple(final.shape) == state_size


def test_the_torch_kernel_itself_runs_without_tokens():
    inputs = empty_inputs("T=0")
    o, final = call(chunk_gated_delta_rule_torch, inputs)
    assert tuple(o.shape) == (2, 0, HV, V)
    torch.testing.assert_close(final, inputs["initial_state"], rtol=0, atol=0)
