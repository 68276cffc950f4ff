"""Which q/k l2norm the `flashqla` backend runs; the GPU side is in test_gpu_qk_l2norm.py."""

from __future__ import annotations

import pytest
import torch

from slime_flashqla.gdn.packages import is_installed
from slime_flashqla.gdn.qk_l2norm import FLA, FLASHQLA, l2norm_qk, qk_l2norm_impl


def test_without_the_flag_nothing_is_normalised():
    q, k = torch.randn(1, 4, 2, 8), torch.randn(1, 4, 2, 8)
    kwargs = {"use_qk_l2norm_in_kernel": False, "cu_seqlens": None}
    assert l2norm_qk(q, k, kwargs) == (q, k, kwargs)


@pytest.mark.skipif(is_installed("fla"), reason="FLA is installed here")
def test_without_fla_flashqla_normalises_q_k_itself():
    assert qk_l2norm_impl() == FLASHQLA
    q, k = torch.randn(1, 4, 2, 8), torch.randn(1, 4, 2, 8)
    kwargs = {"use_qk_l2norm_in_kernel": True}
    out_q, out_k, out_kwargs = l2norm_qk(q, k, kwargs)
    assert out_q is q and out_k is k and out_kwargs == {"use_qk_l2norm_in_kernel": True}


@pytest.mark.skipif(not is_installed("fla"), reason="needs FLA")
def test_with_fla_its_triton_l2norm_is_chosen():
    assert qk_l2norm_impl() == FLA
