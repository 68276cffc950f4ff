"""On a GPU: what the CPU suite checks of the input check, with CUDA tensors and the real kernels.

The verdict cache reuses a verdict for a CUDA cu_seqlens without reading it again; these
tests check that the kernels then read the values that were checked, that a call with no
tokens launches nothing, and that cu_seqlens made under inference_mode runs.
"""

from __future__ import annotations

import pytest
import torch

from helpers.gdn_inputs import call_gdn, make_inputs
from slime_flashqla.gdn import get_chunk_gated_delta_rule
from slime_flashqla.host.packages import is_installed

pytestmark = pytest.mark.gpu
KERNELS = [
    pytest.param("fla", marks=pytest.mark.skipif(not is_installed("fla"), reason="FLA not installed")),
    pytest.param("flashqla", marks=pytest.mark.skipif(not is_installed("flash_qla"), reason="flash-qla not installed")),
    "auto",
    "torch",
]


def gpu_inputs(lengths=(300, 724), **overrides):
    settings = dict(key_heads=16, value_heads=32, key_dim=128, value_dim=128, dtype=torch.bfloat16)
    settings.update(beta_dtype=torch.bfloat16, device="cuda", lengths=lengths, **overrides)
    return make_inputs(**settings)


def rel(actual, expected):
    return ((actual.double() - expected.double()).norm() / expected.double().norm()).item()


# The same kernel on the same values agrees far below SAME; moving a sequence boundary by 200
# tokens changes the output far above DIFFERENT (the state restarts at another token).
SAME, DIFFERENT = 1e-3, 1e-2


def call(backend, inputs, cu_seqlens):
    fn = get_chunk_gated_delta_rule(backend)
    return call_gdn(fn, inputs, output_final_state=True, use_qk_l2norm_in_kernel=True, cu_seqlens=cu_seqlens)


@pytest.mark.parametrize("backend", KERNELS)
def test_an_edit_through_data_never_reaches_the_kernels(backend):
    inputs = gpu_inputs()
    seqlens = inputs["cu_seqlens"].clone()
    o, final = call(backend, inputs, seqlens)
    seqlens.data[1] = 5000  # out of bounds, and invisible to the version counter
    o_again, final_again = call(backend, inputs, seqlens)
    torch.cuda.synchronize()  # an out-of-bounds read would surface here
    assert rel(o_again, o) < SAME and rel(final_again, final) < SAME  # the checked values ran
    seqlens[1] = 500  # an ordinary in-place edit is read again
    o_new, _ = call(backend, inputs, seqlens)
    o_fresh, _ = call(backend, inputs, seqlens.clone())
    assert rel(o_new, o_fresh) < SAME and rel(o_new, o) > DIFFERENT


@pytest.mark.parametrize("backend", KERNELS)
@pytest.mark.parametrize("lengths", [(0,), (0, 0, 0)], ids=["T=0", "three-empty"])
def test_no_tokens_give_empty_outputs(backend, lengths):
    inputs = gpu_inputs(lengths=lengths)
    o, final = call(backend, inputs, inputs["cu_seqlens"])
    torch.cuda.synchronize()
    assert tuple(o.shape) == (1, 0, 32, 128)
    torch.testing.assert_close(final, inputs["initial_state"], rtol=0, atol=0)


@pytest.mark.parametrize("backend", KERNELS)
def test_cu_seqlens_made_under_inference_mode_runs(backend):
    inputs = gpu_inputs()
    expected = call(backend, inputs, inputs["cu_seqlens"].clone())
    with torch.inference_mode():
        seqlens = inputs["cu_seqlens"].clone()
        got = call(backend, inputs, seqlens)
    assert rel(got[0], expected[0]) < SAME and rel(got[1], expected[1]) < SAME
