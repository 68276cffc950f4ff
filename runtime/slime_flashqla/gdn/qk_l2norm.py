"""The q/k L2 normalisation the `flashqla` backend runs before FlashQLA's kernels.

FlashQLA normalises q/k with a function decorated with `@torch.compile`. Its first call in
every process starts TorchDynamo and Inductor, which took most of a warm first training
step on an H200 (docs/benchmarks.md) although nothing was left to compile. FLA's Triton
l2norm computes the same thing (float32 sum of squares + eps, rsqrt, cast back) and loads
from Triton's cache, and the GDN layers import FLA anyway for their convolution and norm.
"""

from __future__ import annotations

import functools

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


@functools.cache  # installed packages do not change within a process; find_spec costs microseconds
def qk_l2norm_impl() -> str:
    """Which l2norm the `flashqla` backend runs on q/k: FLA's Triton kernel when FLA is installed."""
    return FLA if is_installed("fla") else FLASHQLA


def l2norm_qk(q, k, kwargs: dict):
    """Normalise q/k with FLA's kernel where FlashQLA was asked to; return (q, k, kwargs for FlashQLA)."""
    if not kwargs.get("use_qk_l2norm_in_kernel") or qk_l2norm_impl() != FLA:
        return q, k, kwargs
    l2norm = _fla_l2norm()
    return l2norm(q), l2norm(k), {**kwargs, "use_qk_l2norm_in_kernel": False}
