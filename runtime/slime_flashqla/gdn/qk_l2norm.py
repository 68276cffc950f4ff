"""The q/k L2 normalisation the `flashqla` and `fla` backends run before their kernels.

Both kernels can normalise q/k themselves (`use_qk_l2norm_in_kernel`), and both do it badly
for an RL stream: FlashQLA's l2norm is `@torch.compile`d, so its first call in every process
starts TorchDynamo and Inductor, and FLA's Triton l2norm autotunes on (D, cdiv(rows, 65536)),
so every new bucket of pack sizes tuned ~25 configurations again (a stall mid-training:
docs/benchmarks.md). This package's fixed-launch Triton l2norm (slime_flashqla.triton_ops) computes the same
thing (float32 sum of squares + eps, rsqrt, cast back), compiles once per (dtype, D) and loads
from Triton's disk cache in every later process. q and k share one autograd node.
"""

from __future__ import annotations

import functools


@functools.cache
def _qk_function():
    import torch

    from slime_flashqla.triton_ops import l2norm_bwd, l2norm_fwd

    class QKL2Norm(torch.autograd.Function):
        """y = x * rsqrt(sum(x^2) + 1e-6) over the last dim, for q and k in one autograd node."""

        @staticmethod
        def forward(ctx, q, k):
            q_out, q_rstd = l2norm_fwd(q)
            k_out, k_rstd = l2norm_fwd(k)
            ctx.save_for_backward(q_out, q_rstd, k_out, k_rstd)
            return q_out, k_out

        @staticmethod
        def backward(ctx, dq, dk):
            q_out, q_rstd, k_out, k_rstd = ctx.saved_tensors
            return l2norm_bwd(q_out, q_rstd, dq), l2norm_bwd(k_out, k_rstd, dk)

    def normalise(q, k):
        if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad):
            return QKL2Norm.apply(q, k)
        # Nothing to differentiate (log-prob passes and rollouts under no_grad): the forward
        # kernels alone, without an autograd node to build and save tensors for.
        return l2norm_fwd(q)[0], l2norm_fwd(k)[0]

    return normalise


def l2norm_qk(q, k, kwargs: dict):
    """Normalise q/k here where the kernel was asked to; return (q, k, kwargs with the kernel's own l2norm off)."""
    if not kwargs.get("use_qk_l2norm_in_kernel"):
        return q, k, kwargs
    q, k = _qk_function()(q, k)
    return q, k, {**kwargs, "use_qk_l2norm_in_kernel": False}
