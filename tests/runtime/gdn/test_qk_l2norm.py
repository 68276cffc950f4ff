"""The q/k l2norm the `flashqla` and `fla` backends run: this package's Triton kernels in one autograd node.

On a machine without CUDA the kernels run in Triton's interpreter (tests/helpers/triton_interpreter.py);
the compiled kernels and the backends around them are tested on a GPU in test_gpu_qk_l2norm.py.
"""

from __future__ import annotations

import pytest
import torch

from helpers.triton_interpreter import KERNELS_UNAVAILABLE
from slime_flashqla.gdn.backends import KERNEL_BACKENDS
from slime_flashqla.gdn.qk_l2norm import l2norm_qk

needs_triton = pytest.mark.skipif(KERNELS_UNAVAILABLE is not None, reason=KERNELS_UNAVAILABLE or "")


def test_without_the_flag_nothing_is_normalised():
    q, k = torch.randn(1, 4, 2, 8), torch.randn(1, 4, 2, 8)
    kwargs = {"use_qk_l2norm_in_kernel": False, "cu_seqlens": None}
    assert l2norm_qk(q, k, kwargs) == (q, k, kwargs)


def _reference(x):
    x = x.double()
    return x * torch.rsqrt(x.square().sum(-1, keepdim=True) + 1e-6)


@needs_triton
def test_q_and_k_are_normalised_in_one_autograd_node_and_the_kernel_flag_turned_off():
    q = torch.randn(1, 37, 2, 16, requires_grad=True)
    k = torch.randn(1, 37, 2, 16, requires_grad=True)
    out_q, out_k, kwargs = l2norm_qk(q, k, {"use_qk_l2norm_in_kernel": True, "cu_seqlens": None})
    assert kwargs == {"use_qk_l2norm_in_kernel": False, "cu_seqlens": None}
    assert out_q.grad_fn is out_k.grad_fn and type(out_q.grad_fn).__name__ == "QKL2NormBackward"
    torch.testing.assert_close(out_q.double(), _reference(q), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out_k.double(), _reference(k), rtol=1e-5, atol=1e-6)
    dq, dk = torch.randn_like(q), torch.randn_like(k)
    (out_q * dq).sum().add((out_k * dk).sum()).backward()
    q64, k64 = q.detach().double().requires_grad_(), k.detach().double().requires_grad_()
    (_reference(q64) * dq.double()).sum().add((_reference(k64) * dk.double()).sum()).backward()
    torch.testing.assert_close(q.grad.double(), q64.grad, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(k.grad.double(), k64.grad, rtol=1e-4, atol=1e-6)


@needs_triton
def test_under_no_grad_no_autograd_node_is_built():
    q = torch.randn(1, 5, 2, 16, requires_grad=True)
    with torch.no_grad():
        out_q, out_k, _ = l2norm_qk(q, q.clone(), {"use_qk_l2norm_in_kernel": True})
    assert out_q.grad_fn is None and out_k.grad_fn is None
    torch.testing.assert_close(out_q.double(), _reference(q.detach()), rtol=1e-5, atol=1e-6)


@needs_triton
@pytest.mark.parametrize("backend", ["fla", "flashqla"])
def test_fla_and_flashqla_get_q_and_k_normalised_here_with_their_own_l2norm_off(backend):
    """Their kernels' own l2norms (autotuned, torch.compile'd) never run: the backend hands them normalised q/k."""
    q = torch.randn(1, 9, 2, 16, requires_grad=True)
    k = torch.randn(1, 9, 2, 16, requires_grad=True)
    v, g, beta = torch.randn(1, 9, 2, 16), torch.randn(1, 9, 2).sigmoid().log(), torch.rand(1, 9, 2)
    out_q, out_k, *_, kwargs = KERNEL_BACKENDS[backend].prepare(q, k, v, g, beta, {"use_qk_l2norm_in_kernel": True})
    assert kwargs == {"use_qk_l2norm_in_kernel": False}
    assert out_q.grad_fn is out_k.grad_fn and type(out_q.grad_fn).__name__ == "QKL2NormBackward"
    torch.testing.assert_close(out_q.double(), _reference(q), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out_k.double(), _reference(k), rtol=1e-5, atol=1e-6)
