"""Every input error is a ValueError (GDNInputError) raised by the check, before any kernel work."""

from __future__ import annotations

from contextlib import contextmanager, nullcontext

import numpy as np
import pytest
import torch

from helpers.gdn_inputs import call_gdn, make_inputs
from helpers.raised_where import frame_files, raised_before_package, raised_by_check
from slime_flashqla.gdn import GDNInputError, check_inputs, get_chunk_gated_delta_rule
from slime_flashqla.gdn.api import GDNKernel
from slime_flashqla.gdn.backends import KERNEL_BACKENDS


def call(inputs, backend="torch", **overrides):
    args = {**inputs, **overrides}
    fn = get_chunk_gated_delta_rule(backend) if backend != "flashqla" else GDNKernel(KERNEL_BACKENDS["flashqla"])
    return call_gdn(fn, args, scale=args.get("scale"), output_final_state=True)


@pytest.fixture
def inputs():
    return make_inputs(lengths=(10, 20))


def cu(*values, dtype=torch.int32):
    return torch.tensor(values, dtype=dtype)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"cu_seqlens": cu(0, 10, 20, dtype=torch.float32)}, "int32 or int64"),
        ({"cu_seqlens": cu(0, 10, 30).view(1, 3)}, "1-D"),
        ({"cu_seqlens": cu(1, 10, 30)}, "start at 0"),
        ({"cu_seqlens": cu(0, 10, 29)}, "end at T=30"),
        ({"cu_seqlens": cu(0, 10, 31)}, "end at T=30"),
        ({"cu_seqlens": cu(0, 20, 10, 30)}, "non-decreasing"),
        ({"cu_seqlens": cu(30)}, "at least 2"),
        ({"cu_seqlens": [0, 10, 30]}, "torch.Tensor"),
    ],
)
def test_bad_cu_seqlens(inputs, overrides, message):
    if "initial_state" not in overrides:
        overrides["initial_state"] = None
    with pytest.raises(ValueError, match=message):
        call(inputs, **overrides)


def test_cu_seqlens_needs_batch_one():
    dense = make_inputs(batch=2, lengths=(30,), varlen=False, initial_state=False)
    with pytest.raises(ValueError, match="batch must be 1"):
        call(dense, cu_seqlens=cu(0, 30))


@pytest.mark.parametrize(
    ("name", "shape", "message"),
    [
        ("q", (1, 30, 2, 8), "same shape"),
        ("k", (1, 30, 3, 16), "same shape"),
        ("v", (1, 29, 4, 8), "v must be"),
        ("v", (1, 30, 3, 8), "multiple of the key head count"),
        ("g", (1, 30, 2), "g must be"),
        ("beta", (1, 30, 4, 1), "beta must be"),
        ("initial_state", (3, 4, 16, 8), "initial_state must be"),
        ("q", (30, 2, 16), "q, k must be"),
    ],
)
def test_inconsistent_shapes(inputs, name, shape, message):
    with pytest.raises(ValueError, match=message):
        call(inputs, **{name: torch.randn(shape)})


def test_mixed_dtypes(inputs):
    with pytest.raises(ValueError, match="share one dtype"):
        call(inputs, v=inputs["v"].double())


def test_integer_tensor(inputs):
    with pytest.raises(ValueError, match="floating"):
        call(inputs, beta=torch.ones(1, 30, 4, dtype=torch.int64))


def test_mixed_devices(inputs):
    with pytest.raises(ValueError, match="one device"):
        call(inputs, g=torch.empty(1, 30, 4, device="meta"))


@pytest.mark.parametrize("scale", [0, -1.0, "0.1"])
def test_bad_scale(inputs, scale):
    with pytest.raises(ValueError, match="scale"):
        call(inputs, scale=scale)


def test_cu_seqlens_checked_again_after_in_place_edit(inputs):
    seqlens = inputs["cu_seqlens"].clone()
    call(inputs, cu_seqlens=seqlens)
    seqlens[1] = 25  # still valid; then invalid
    call(inputs, cu_seqlens=seqlens)
    seqlens[2] = 24
    with pytest.raises(ValueError, match="end at T=30"):
        call(inputs, cu_seqlens=seqlens, initial_state=None)


def test_check_inputs_reports_sizes(inputs):
    shape = check_inputs(inputs["q"], inputs["k"], inputs["v"], inputs["g"], inputs["beta"], None, None, cu(0, 4, 30))
    assert (shape.tokens, shape.key_heads, shape.value_heads, shape.num_sequences, shape.varlen) == (30, 2, 4, 2, True)


@pytest.mark.parametrize(
    ("key_dim", "value_dim", "dtype", "message"),
    [
        (64, 128, torch.bfloat16, "K = V = 128"),
        (128, 64, torch.bfloat16, "K = V = 128"),
        (128, 128, torch.float32, "bfloat16 or float16"),
    ],
)
def test_flashqla_input_limits_fail_before_any_kernel(key_dim, value_dim, dtype, message):
    """FlashQLA's own limits are ValueErrors too (before the device check; flash_qla is never imported)."""
    inputs = make_inputs(lengths=(8,), key_dim=key_dim, value_dim=value_dim, dtype=dtype, initial_state=False)
    with pytest.raises(ValueError, match=message):
        call(inputs, backend="flashqla")


def test_flashqla_rejects_cpu_tensors():
    inputs = make_inputs(lengths=(8,), key_dim=128, value_dim=128, dtype=torch.bfloat16, initial_state=False)
    with pytest.raises(ValueError, match="CUDA tensors"):
        call(inputs, backend="flashqla")


# --- the holes a bad-input sweep found (issue 14) ---


@contextmanager
def refused(message):
    """Expect a GDNInputError matching `message`, raised by the check's own code."""
    with pytest.raises(GDNInputError, match=message) as info:
        yield info
    assert raised_by_check(info.value), frame_files(info.value)


@pytest.mark.parametrize("backend", ["torch", "auto"])
def test_zero_value_heads_are_refused(backend):
    inputs = make_inputs(lengths=(8,), key_heads=2, value_heads=2, initial_state=False)
    with refused("Hv=0 must be a positive multiple"):
        call(inputs, backend, v=inputs["v"][:, :, :0], g=inputs["g"][:, :, :0], beta=inputs["beta"][:, :, :0])


@pytest.mark.parametrize("backend", ["torch", "auto"])
@pytest.mark.parametrize(("name", "message"), [("q", "K=0"), ("v", "V=0")])
def test_zero_head_sizes_are_refused(backend, name, message):
    inputs = make_inputs(lengths=(8,), initial_state=False)
    overrides = {name: inputs[name][..., :0]}
    if name == "q":
        overrides["k"] = inputs["k"][..., :0]
    with refused(f"head sizes must be positive.*{message}"):
        call(inputs, backend, **overrides)


@pytest.mark.parametrize("backend", ["torch", "auto"])
@pytest.mark.parametrize("scale", [float("inf"), float("-inf"), float("nan"), True, False, torch.tensor(0.5)], ids=repr)
def test_scale_must_be_a_finite_positive_number(inputs, backend, scale):
    with refused("scale must be a finite positive number"):
        call(inputs, backend, scale=scale)


@pytest.mark.parametrize("backend", ["torch", "auto"])
@pytest.mark.parametrize("state", [[0.0], (1, 2), 0.5], ids=["list", "tuple", "float"])
def test_initial_state_must_be_a_tensor(inputs, backend, state):
    with refused("initial_state must be a torch.Tensor or None"):
        call(inputs, backend, initial_state=state)


@pytest.mark.parametrize("backend", ["torch", "auto"])
def test_an_unknown_keyword_is_refused_before_anything_runs(inputs, backend):
    fn = get_chunk_gated_delta_rule(backend)
    with pytest.raises(TypeError, match="unexpected keyword argument 'chunk_size'") as info:
        fn(inputs["q"], inputs["k"], inputs["v"], g=inputs["g"], beta=inputs["beta"], chunk_size=32)
    assert raised_before_package(info.value), frame_files(info.value)
    if backend == "auto":
        assert fn.choices == {}  # nothing was checked or chosen


def make_in(mode):
    """The context an input is made in, or a call is made in."""
    return {"normal": nullcontext, "no_grad": torch.no_grad, "inference_mode": torch.inference_mode}[mode]()


@pytest.mark.parametrize("backend", ["torch", "auto"])
@pytest.mark.parametrize("made", ["normal", "no_grad", "inference_mode"])
@pytest.mark.parametrize("called", ["normal", "no_grad", "inference_mode"])
def test_inputs_made_or_called_under_inference_mode_or_no_grad_run(backend, made, called):
    expected = call(make_inputs(lengths=(10, 20)), "torch")
    with make_in(made):
        inputs = make_inputs(lengths=(10, 20))
    with make_in(called):
        first = call(inputs, backend)
        again = call(inputs, backend)  # the second call takes the verdict path
    for got in (first, again):
        torch.testing.assert_close(got[0], expected[0], rtol=0, atol=0)
        torch.testing.assert_close(got[1], expected[1], rtol=0, atol=0)


def test_cu_seqlens_edited_through_data_is_read_again_on_cpu(inputs):
    seqlens = inputs["cu_seqlens"].clone()
    call(inputs, cu_seqlens=seqlens, initial_state=None)
    version = seqlens._version
    seqlens.data[1] = 40  # the version counter does not see this
    assert seqlens._version == version
    with refused("non-decreasing, but 40 is followed by 30"):
        call(inputs, cu_seqlens=seqlens, initial_state=None)
    seqlens.data[1] = 25  # valid again: the output is the one for the new values
    o, final = call(inputs, cu_seqlens=seqlens, initial_state=None)
    expected = call(inputs, cu_seqlens=cu(0, 25, 30), initial_state=None)
    torch.testing.assert_close(o, expected[0], rtol=0, atol=0)
    torch.testing.assert_close(final, expected[1], rtol=0, atol=0)


def test_backend_limits_are_input_errors_too():
    inputs = make_inputs(lengths=(8,), key_dim=64, value_dim=64, dtype=torch.bfloat16, initial_state=False)
    with pytest.raises(GDNInputError, match="K = V = 128"):
        call(inputs, backend="flashqla")


@pytest.mark.parametrize("backend", ["torch", "auto"])
@pytest.mark.parametrize("scale", [np.float32(0.5), np.float16(0.5), np.float64(0.5), np.int64(1), 0.5, 2])
def test_every_real_number_type_is_a_scale(inputs, backend, scale):
    """Every real number type is a scale (numpy's float32 as well as float64, a float subclass) (issue 25 D23)."""
    o, _ = call(inputs, backend, scale=scale)
    expected, _ = call(inputs, backend, scale=float(scale))
    torch.testing.assert_close(o, expected, rtol=0, atol=0)


@pytest.mark.parametrize("backend", ["torch", "auto"])
def test_a_boolean_numpy_scale_is_refused(inputs, backend):
    with refused("scale must be a finite positive number"):
        call(inputs, backend, scale=np.bool_(True))


def test_meta_cu_seqlens_is_refused_in_the_check():
    """cu_seqlens on the meta device is refused by the check, not by torch's .tolist() (issue 25 D21)."""
    meta = {key: (t.to("meta") if t is not None else None) for key, t in make_inputs(lengths=(10, 20)).items()}
    with refused("cu_seqlens on the meta device cannot be checked"):
        call(meta, "torch")
    with refused("cu_seqlens on the meta device cannot be checked"):
        check_inputs(meta["q"], meta["k"], meta["v"], meta["g"], meta["beta"], cu_seqlens=meta["cu_seqlens"])
