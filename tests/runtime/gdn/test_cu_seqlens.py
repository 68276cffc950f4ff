"""The cu_seqlens verdict cache: reused only for the values it checked, and the kernels read those values.

On a GPU a verdict is reused while the caller's tensor is unchanged as far as its version,
storage and size tell; `CuSeqlensVerdicts(reuse_on_cpu=True)` runs that same path on CPU
tensors, so this machine without a GPU tests it.
"""

from __future__ import annotations

import gc
import weakref

import pytest
import torch

from slime_flashqla.gdn import GDNInputError
from slime_flashqla.gdn.cu_seqlens import CuSeqlensVerdicts, checked_cu_seqlens, verdicts

TOKENS = 30


def cu(*values, dtype=torch.int32):
    return torch.tensor(values, dtype=dtype)


@pytest.fixture
def reusing():
    return CuSeqlensVerdicts(reuse_on_cpu=True)


def test_the_kernels_read_a_private_copy_of_the_checked_values(reusing):
    seqlens = cu(0, 10, 30)
    checked = reusing.checked(seqlens, TOKENS)
    assert checked is not seqlens
    assert checked.data_ptr() != seqlens.data_ptr()
    assert checked.tolist() == [0, 10, 30] and checked.dtype == torch.int32


def test_an_edit_through_data_reuses_the_verdict_for_the_values_it_checked(reusing):
    seqlens = cu(0, 10, 30)
    checked = reusing.checked(seqlens, TOKENS)
    version = seqlens._version
    seqlens.data[1] = 40  # invalid, and invisible to the version counter, data_ptr and size
    assert seqlens._version == version
    again = reusing.checked(seqlens, TOKENS)  # not read again (it would fail: 40 > 30)...
    assert again is checked
    assert again.tolist() == [0, 10, 30]  # ...and the kernels never see 40


def test_an_in_place_edit_is_read_again(reusing):
    seqlens = cu(0, 10, 30)
    reusing.checked(seqlens, TOKENS)
    seqlens[1] = 40
    with pytest.raises(GDNInputError, match="non-decreasing"):
        reusing.checked(seqlens, TOKENS)
    seqlens[1] = 25
    assert reusing.checked(seqlens, TOKENS).tolist() == [0, 25, 30]


@pytest.mark.parametrize(
    "swap", [lambda t: torch.tensor([0, 40, 30], dtype=torch.int32), lambda t: t.data[:2]], ids=["new", "shorter"]
)
def test_assigning_to_data_is_read_again(reusing, swap):
    seqlens = cu(0, 10, 30)
    reusing.checked(seqlens, TOKENS)
    version = seqlens._version
    seqlens.data = swap(seqlens)  # new storage, or the same storage with fewer entries: no version bump
    assert seqlens._version == version
    with pytest.raises(GDNInputError, match=r"non-decreasing|end at T=30"):
        reusing.checked(seqlens, TOKENS)


def test_a_different_token_count_is_read_again(reusing):
    seqlens = cu(0, 10, 30)
    reusing.checked(seqlens, TOKENS)
    with pytest.raises(GDNInputError, match="end at T=31"):
        reusing.checked(seqlens, 31)


def test_an_inference_tensor_is_read_on_every_call(reusing):
    with torch.inference_mode():
        seqlens = cu(0, 10, 30)
        checked = reusing.checked(seqlens, TOKENS)
        seqlens[1] = 40  # an inference tensor has no version counter to tell
        with pytest.raises(GDNInputError, match="non-decreasing"):
            reusing.checked(seqlens, TOKENS)
    assert not checked.is_inference()  # a kernel may save the copy for backward outside inference mode


def test_the_same_values_in_a_new_tensor_reuse_the_copy(reusing):
    """FLA caches its chunk indices by tensor identity: one copy per set of values keeps that cache hitting."""
    first = reusing.checked(cu(0, 10, 30), TOKENS)
    assert reusing.checked(cu(0, 10, 30), TOKENS) is first
    assert reusing.checked(first, TOKENS) is first  # what a layer passes on to the kernel
    assert reusing.checked(cu(0, 10, 30, dtype=torch.int64), TOKENS) is not first


def test_a_strided_cu_seqlens_reaches_the_kernels_dense(reusing):
    seqlens = cu(0, 0, 10, 10, 30, 30)[::2]
    checked = reusing.checked(seqlens, TOKENS)
    assert checked.is_contiguous() and checked.tolist() == [0, 10, 30]


def test_the_copy_lives_as_long_as_the_callers_tensor(reusing):
    """A CUDA graph captured with the copy must not read freed memory after the cache moved on."""
    first = cu(0, 10, 30)
    copy = weakref.ref(reusing.checked(first, TOKENS))
    reusing.checked(cu(0, 5, 30), TOKENS)  # the cache moves on
    gc.collect()
    assert copy() is not None
    del first
    gc.collect()
    assert copy() is None


def test_on_cpu_every_call_reads_the_values():
    verdicts.clear()
    seqlens = cu(0, 10, 30)
    assert checked_cu_seqlens(seqlens, TOKENS).tolist() == [0, 10, 30]
    seqlens.data[1] = 40
    with pytest.raises(GDNInputError, match="non-decreasing"):
        checked_cu_seqlens(seqlens, TOKENS)
    seqlens.data[1], seqlens.data[2] = 20, 25
    assert checked_cu_seqlens(seqlens, 25).tolist() == [0, 20, 25]


@pytest.mark.parametrize("reuse_on_cpu", [True, False], ids=["reusing", "reading"])
def test_an_in_place_edit_of_the_checked_copy_is_read_again(reuse_on_cpu):
    """A checked copy that was written into is read and checked again, never trusted as it is (issue 25 D6)."""
    cache = CuSeqlensVerdicts(reuse_on_cpu=reuse_on_cpu)
    checked = cache.checked(cu(0, 10, 30), TOKENS)
    checked.copy_(cu(0, 40, 30))
    with pytest.raises(GDNInputError, match="non-decreasing"):
        cache.checked(checked, TOKENS)
    # The same values as the edited copy once held, in a new tensor: a fresh copy, never the edited one.
    fresh = cache.checked(cu(0, 10, 30), TOKENS)
    assert fresh is not checked and fresh.tolist() == [0, 10, 30]
    checked.copy_(cu(0, 20, 30))  # edited to values that pass: read, and checked again
    assert cache.checked(checked, TOKENS).tolist() == [0, 20, 30]


def test_an_edit_of_a_cpu_copy_that_bumps_no_version_is_read_again():
    """A CPU copy passed back is read again: edits by `.data` or numpy bump no version, yet are caught (issue 25)."""
    verdicts.clear()
    copy = checked_cu_seqlens(cu(0, 3, 10), 10)
    copy.data[1], copy.data[2] = 7, 3
    with pytest.raises(GDNInputError, match="end at T=10"):
        checked_cu_seqlens(copy, 10)
    verdicts.clear()
    copy = checked_cu_seqlens(cu(0, 3, 10), 10)
    copy.numpy()[:] = [0, 7, 3]
    with pytest.raises(GDNInputError, match="end at T=10"):
        checked_cu_seqlens(copy, 10)


def test_the_probe_s_edit_of_the_runtime_s_copy_is_refused():
    from slime_flashqla.gdn import check_inputs, get_chunk_gated_delta_rule

    q, k, v = torch.randn(1, 10, 2, 8), torch.randn(1, 10, 2, 8), torch.randn(1, 10, 4, 8)
    g, b = torch.randn(1, 10, 4).sigmoid().log(), torch.rand(1, 10, 4)
    copy = check_inputs(q, k, v, g, b, None, None, cu(0, 3, 10)).cu_seqlens
    copy.copy_(cu(0, 7, 3))
    with pytest.raises(GDNInputError, match="end at T=10"):
        get_chunk_gated_delta_rule("torch")(q, k, v, g=g, beta=b, cu_seqlens=copy)


def test_meta_cu_seqlens_is_refused_by_the_layer_too():
    """The layer refuses meta cu_seqlens with the check's message, before torch's own error (issue 25 D21)."""
    from slime_flashqla.layers import Qwen3NextGatedDeltaNet
    from slime_flashqla.workload.models import gdn_layer_config

    config = {**gdn_layer_config(2, 4, head_dim=16, hidden_size=64), "linear_value_head_dim": 8}
    layer = Qwen3NextGatedDeltaNet(config, backend="torch").to("meta")
    with pytest.raises(GDNInputError, match="cu_seqlens on the meta device cannot be checked"):
        layer(torch.empty(1, 30, 64, device="meta"), cu_seqlens=cu(0, 10, 30).to("meta"))
