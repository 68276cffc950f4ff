"""Property test of the input check over random shapes, head counts, dtypes and cu_seqlens.

Valid inputs (any context: plain, no_grad, inference_mode) must match the float64 per-token
recurrence; invalid ones must be refused with a GDNInputError whose innermost traceback frame
is the check's own code (or, for an unknown keyword, a TypeError before any of the package
runs), never an error from inside a kernel.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass

import pytest
import torch

# A dev tool (env/dev-tools.txt): the `tests` session has it, the images' test tools do not.
pytest.importorskip("hypothesis", reason="hypothesis is not installed (env/dev-tools.txt)")
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from helpers.gdn_inputs import call_gdn, make_inputs
from helpers.gdn_recurrence import recurrent_gated_delta_rule
from helpers.raised_where import frame_files, raised_before_package, raised_by_check
from slime_flashqla.gdn import GDNInputError, get_chunk_gated_delta_rule

DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)
# ||torch backend - float64 recurrence|| / ||recurrence||: the backend computes in float32
# (float64 for float64) and rounds the output to the input dtype; a wrong chunk, gate or
# head mapping errs by O(1).
TOLERANCE = {torch.float64: 1e-9, torch.float32: 1e-4, torch.bfloat16: 2e-2, torch.float16: 4e-3}
CONTEXTS = {"plain": nullcontext, "no_grad": torch.no_grad, "inference_mode": torch.inference_mode}
# CI has 2 cores: a few dozen examples each, no per-example deadline (the recurrence is a Python loop).
PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@dataclass(frozen=True)
class Case:
    """One random call: sizes, dtypes, options, and the contexts its inputs are made and run in."""

    batch: int
    lengths: tuple[int, ...] | None  # packed sequences (cu_seqlens), or None for a dense batch
    tokens: int
    key_heads: int
    value_heads: int
    key_dim: int
    value_dim: int
    dtype: torch.dtype
    gate_dtype: torch.dtype
    initial_state: bool
    scale: float | None
    l2norm: bool
    backend: str
    made: str
    called: str
    seed: int


@st.composite
def cases(draw) -> Case:
    key_heads = draw(st.integers(1, 3))
    value_heads = key_heads * draw(st.integers(1, 3))  # GVA: Hv a multiple of Hk
    dtype = draw(st.sampled_from(DTYPES))
    if draw(st.booleans()):
        lengths = tuple(draw(st.lists(st.integers(0, 20), min_size=1, max_size=4)))
        batch, tokens = 1, sum(lengths)
    else:
        lengths, batch, tokens = None, draw(st.integers(1, 3)), draw(st.integers(0, 24))
    return Case(
        batch=batch,
        lengths=lengths,
        tokens=tokens,
        key_heads=key_heads,
        value_heads=value_heads,
        key_dim=draw(st.integers(1, 6)),
        value_dim=draw(st.integers(1, 6)),
        dtype=dtype,
        gate_dtype=draw(st.sampled_from((torch.float32, dtype))),
        initial_state=draw(st.booleans()),
        scale=draw(st.none() | st.floats(0.05, 2.0)),
        l2norm=draw(st.booleans()),
        backend=draw(st.sampled_from(("torch", "auto"))),
        made=draw(st.sampled_from(tuple(CONTEXTS))),
        called=draw(st.sampled_from(tuple(CONTEXTS))),
        seed=draw(st.integers(0, 2**16)),
    )


def build(case: Case) -> dict:
    """Random inputs for the case (helpers.gdn_inputs), made in its `made` context."""
    packed = case.lengths is not None
    with CONTEXTS[case.made]():
        inputs = make_inputs(
            batch=case.batch,
            lengths=case.lengths if packed else (case.tokens,),
            varlen=packed,
            key_heads=case.key_heads,
            value_heads=case.value_heads,
            key_dim=case.key_dim,
            value_dim=case.value_dim,
            dtype=case.dtype,
            beta_dtype=case.gate_dtype,
            initial_state=case.initial_state,
            seed=case.seed,
        )
        inputs["g"] = inputs["g"].to(case.gate_dtype)
        if not case.l2norm:
            # Unit keys keep the delta rule's update (I - beta k k^T) contracting, as l2norm does.
            k = inputs["k"].double()
            inputs["k"] = (k / k.norm(dim=-1, keepdim=True).clamp_min(1e-3)).to(case.dtype)
    return inputs


def run(case: Case, inputs: dict, **extra):
    fn = get_chunk_gated_delta_rule(case.backend)
    with CONTEXTS[case.called]():
        return call_gdn(
            fn,
            inputs,
            scale=inputs.get("scale", case.scale),
            output_final_state=True,
            use_qk_l2norm_in_kernel=case.l2norm,
            **extra,
        )


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    scale = expected.norm().item()
    return (actual.double() - expected).norm().item() / (scale if scale > 0 else 1.0)


@PROPERTY
@given(cases())
def test_valid_inputs_match_the_float64_recurrence(case):
    inputs = build(case)
    o, final = run(case, inputs)
    o_ref, final_ref = recurrent_gated_delta_rule(
        inputs["q"],
        inputs["k"],
        inputs["v"],
        inputs["g"],
        inputs["beta"],
        scale=case.scale,
        initial_state=inputs["initial_state"],
        use_qk_l2norm=case.l2norm,
        cu_seqlens=inputs["cu_seqlens"],
    )
    assert o.shape == o_ref.shape and o.dtype == case.dtype
    assert final.shape == final_ref.shape
    tolerance = TOLERANCE[case.dtype]
    assert relative_error(o, o_ref) <= tolerance
    assert relative_error(final, final_ref) <= max(tolerance, 1e-4)  # the state is float32 at best
    again, _ = run(case, inputs)  # a second call (the verdict path for cu_seqlens) gives the same
    assert torch.equal(again, o)


def _value_heads(inputs: dict, extra: bool) -> dict:
    """v, g and beta with one value head more (extra) or none at all."""
    return {
        name: torch.cat([inputs[name], inputs[name][:, :, :1]], dim=2) if extra else inputs[name][:, :, :0]
        for name in ("v", "g", "beta")
    }


def _shift(cu: torch.Tensor, index: int, delta: int) -> torch.Tensor:
    bad = cu.clone()
    bad[index] += delta
    return bad


def corruption(name: str, case: Case, inputs: dict, fn) -> dict | None:
    """Overrides that make `inputs` invalid in the named way, or None where it does not apply."""
    b, t, hk, hv, dk, dv = case.batch, case.tokens, case.key_heads, case.value_heads, case.key_dim, case.value_dim
    cu = inputs["cu_seqlens"]
    packed = cu is not None
    sequences = len(cu) - 1 if packed else b
    other_dtype = torch.float64 if case.dtype != torch.float64 else torch.float32
    table = {
        "q not a tensor": lambda: {"q": inputs["q"].tolist()},
        "integer g": lambda: {"g": inputs["g"].to(torch.int32)},
        "q 3-D": lambda: {"q": inputs["q"][0]},
        "k of another head size": lambda: {"k": torch.cat([inputs["k"], inputs["k"]], dim=-1)},
        "v of another length": lambda: {"v": torch.cat([inputs["v"], inputs["v"][:, :1]], 1)} if t else None,
        "v of another batch": lambda: {"v": torch.cat([inputs["v"], inputs["v"]], 0)},
        "Hv not a multiple of Hk": lambda: _value_heads(inputs, extra=True) if hk > 1 else None,
        "Hv = 0": lambda: _value_heads(inputs, extra=False),
        "K = 0": lambda: {"q": inputs["q"][..., :0], "k": inputs["k"][..., :0]},
        "V = 0": lambda: {"v": inputs["v"][..., :0]},
        "v of another dtype": lambda: {"v": inputs["v"].to(other_dtype)},
        "g per key head": lambda: {"g": inputs["g"][:, :, :hk]} if hk != hv else None,
        "beta with a trailing 1": lambda: {"beta": inputs["beta"].unsqueeze(-1)},
        "g on another device": lambda: {"g": torch.empty(inputs["g"].shape, device="meta")},
        "initial_state for one more sequence": lambda: {"initial_state": torch.zeros(sequences + 1, hv, dk, dv)},
        "initial_state a list": lambda: {"initial_state": [0.0]},
        "integer initial_state": lambda: {"initial_state": torch.zeros(sequences, hv, dk, dv, dtype=torch.int64)},
        "scale inf": lambda: {"scale": float("inf")},
        "scale nan": lambda: {"scale": float("nan")},
        "scale zero": lambda: {"scale": 0.0},
        "scale negative": lambda: {"scale": -0.5},
        "scale True": lambda: {"scale": True},
        "scale a string": lambda: {"scale": "0.5"},
        "scale a tensor": lambda: {"scale": torch.tensor(0.5)},
        "cu_seqlens a list": lambda: {"cu_seqlens": cu.tolist()} if packed else None,
        "cu_seqlens float": lambda: {"cu_seqlens": cu.float()} if packed else None,
        "cu_seqlens 2-D": lambda: {"cu_seqlens": cu.view(1, -1)} if packed else None,
        "cu_seqlens one entry": lambda: {"cu_seqlens": cu[:1]} if packed else None,
        "cu_seqlens not from 0": lambda: {"cu_seqlens": _shift(cu, 0, 1)} if packed else None,
        "cu_seqlens not to T": lambda: {"cu_seqlens": _shift(cu, -1, 1)} if packed else None,
        "cu_seqlens decreasing": lambda: (
            {"cu_seqlens": torch.cat([cu[:1], cu.new_tensor([t + 1]), cu[1:]])} if packed else None
        ),
        "cu_seqlens with B > 1": lambda: {"cu_seqlens": torch.tensor([0, t], dtype=torch.int32)} if b > 1 else None,
    }
    if name == "cu_seqlens edited through .data after a call that passed":
        if not packed:
            return None
        fn()  # passes, and leaves its verdict behind
        with torch.inference_mode(cu.is_inference()):  # where an inference tensor may be edited
            cu.data[-1] = t + 1  # invisible to the version counter
        return {}
    return table[name]()


CORRUPTIONS = (
    "q not a tensor",
    "integer g",
    "q 3-D",
    "k of another head size",
    "v of another length",
    "v of another batch",
    "Hv not a multiple of Hk",
    "Hv = 0",
    "K = 0",
    "V = 0",
    "v of another dtype",
    "g per key head",
    "beta with a trailing 1",
    "g on another device",
    "initial_state for one more sequence",
    "initial_state a list",
    "integer initial_state",
    "scale inf",
    "scale nan",
    "scale zero",
    "scale negative",
    "scale True",
    "scale a string",
    "scale a tensor",
    "cu_seqlens a list",
    "cu_seqlens float",
    "cu_seqlens 2-D",
    "cu_seqlens one entry",
    "cu_seqlens not from 0",
    "cu_seqlens not to T",
    "cu_seqlens decreasing",
    "cu_seqlens with B > 1",
    "cu_seqlens edited through .data after a call that passed",
)


@pytest.mark.parametrize("name", CORRUPTIONS)
@settings(max_examples=8, deadline=None)
@given(case=cases())
def test_invalid_inputs_are_refused_by_the_check(name, case):
    inputs = build(case)
    overrides = corruption(name, case, inputs, lambda: run(case, inputs))
    assume(overrides is not None)
    with pytest.raises(GDNInputError) as info:
        run(case, {**inputs, **overrides})
    assert raised_by_check(info.value), (name, frame_files(info.value))


@settings(max_examples=20, deadline=None)
@given(cases(), st.sampled_from(("chunk_size", "head_first", "scale_q")))
def test_an_unknown_keyword_is_refused_before_any_code_runs(case, keyword):
    inputs = build(case)
    with pytest.raises(TypeError, match=f"unexpected keyword argument '{keyword}'") as info:
        run(case, inputs, **{keyword: 1})
    assert raised_before_package(info.value), frame_files(info.value)
