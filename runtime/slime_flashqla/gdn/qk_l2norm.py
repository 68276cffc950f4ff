"""The q/k L2 normalisation the `flashqla` backend runs before FlashQLA's kernels.

FlashQLA normalises q/k with a function decorated with `@torch.compile`. Its first call in
every process starts TorchDynamo and Inductor, which took most of a warm first training
step on an H200 (docs/benchmarks.md) although nothing was left to compile. FLA's Triton
l2norm computes the same thing (float32 sum of squares + eps, rsqrt, cast back) and loads
from Triton's cache, and the GDN layers import FLA anyway for their convolution and norm.
"""

from __future__ import annotations

import functools
import inspect

from slime_flashqla.gdn.packages import is_installed

FLA = "fla-triton"
FLASHQLA = "flashqla-torch-compile"


@functools.cache
def _fla_l2norm():
    try:
        from fla.modules.norm.l2norm import l2norm
    except ImportError:  # FLA < 0.5 kept it in fla.modules.l2norm
        from fla.modules.l2norm import l2norm
    return l2norm


@functools.cache
def _fla_l2norm_fwd_bwd():
    """FLA's l2norm forward/backward host functions past its backend dispatch, or None.

    Each public `l2norm` call goes through an autograd Function, FLA's `input_guard` (a
    contiguity pass and a CUDA device context) and FLA's backend dispatch (a sorted backend
    list and a `torch.compiler.disable` frame): tens of microseconds of host time, four times
    a step for q and k. That dominates host-bound small batches, so q and k share one
    autograd Function that calls the two host functions the dispatch falls back to. Where a
    backend is registered for them (not on CUDA today), the public path runs instead.
    """
    module = inspect.getmodule(_fla_l2norm())
    fwd, bwd = getattr(module, "l2norm_fwd", None), getattr(module, "l2norm_bwd", None)
    if fwd is None or bwd is None:
        return None
    try:
        from fla.backends import _function_registries
    except ImportError:  # an FLA without backend dispatch: the functions are the plain ones
        return fwd, bwd
    plain = inspect.unwrap(fwd), inspect.unwrap(bwd)
    for fn in plain:
        registry = _function_registries.get(fn)
        if registry is not None and registry._backends:
            return None
    return plain


@functools.cache
def _qk_function():
    import torch

    fwd, bwd = _fla_l2norm_fwd_bwd()

    class QKL2Norm(torch.autograd.Function):
        """y = x * rsqrt(sum(x^2) + 1e-6) over the last dim, for q and k in one autograd node."""

        @staticmethod
        def forward(ctx, q, k):
            q_out, q_rstd = fwd(q.contiguous())
            k_out, k_rstd = fwd(k.contiguous())
            ctx.save_for_backward(q_out, q_rstd, k_out, k_rstd)
            return q_out, k_out

        @staticmethod
        def backward(ctx, dq, dk):
            q_out, q_rstd, k_out, k_rstd = ctx.saved_tensors
            return bwd(q_out, q_rstd, dq.contiguous()), bwd(k_out, k_rstd, dk.contiguous())

    def run(q, k):
        if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad):
            return QKL2Norm.apply(q, k)
        # Nothing to differentiate (log-prob passes and rollouts under no_grad): the forward
        # host function alone, without an autograd node to build and save tensors for.
        return fwd(q.contiguous())[0], fwd(k.contiguous())[0]

    def normalise(q, k):
        # Triton launches on the current CUDA device; FLA's input_guard switched to the
        # tensors' device, which this keeps for inputs that live elsewhere.
        if q.device.index == torch.cuda.current_device():
            return run(q, k)
        with torch.cuda.device(q.device):
            return run(q, k)

    normalise.autograd_function = QKL2Norm  # the node itself, for host-time comparisons
    return normalise


@functools.cache  # installed packages do not change within a process; find_spec costs microseconds
def qk_l2norm_impl() -> str:
    """Which l2norm the `flashqla` backend runs on q/k: FLA's Triton kernel when FLA is installed."""
    return FLA if is_installed("fla") else FLASHQLA


def l2norm_qk(q, k, kwargs: dict):
    """Normalise q/k with FLA's kernel where FlashQLA was asked to; return (q, k, kwargs for FlashQLA)."""
    if not kwargs.get("use_qk_l2norm_in_kernel") or qk_l2norm_impl() != FLA:
        return q, k, kwargs
    if _fla_l2norm_fwd_bwd() is not None:
        q, k = _qk_function()(q, k)
    else:
        l2norm = _fla_l2norm()
        q, k = l2norm(q), l2norm(k)
    return q, k, {**kwargs, "use_qk_l2norm_in_kernel": False}
