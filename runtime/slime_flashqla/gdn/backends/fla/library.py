"""What the installed FLA does: its own chunk_gated_delta_rule past its dispatch, GVA, forwarding, FLA #640.

FLA >= 0.6 wraps `chunk_gated_delta_rule` in a dispatcher that forwards to FlashQLA
whenever flash_qla is importable (env FLA_FLASH_QLA, default on).  A user who asks for
`fla` must get FLA's kernels, and an A/B benchmark must compare two different kernels,
so we call the function the dispatcher wraps.
"""

from __future__ import annotations

import functools
import inspect
import os

from packaging.version import Version


def _is_dispatch_free(fn) -> bool:
    code = getattr(fn, "__code__", None)
    if code is None or hasattr(fn, "__wrapped__"):
        return False
    path = os.path.normpath(code.co_filename)
    return path.endswith(os.path.join("gated_delta_rule", "chunk.py"))


@functools.cache
def fla_own_chunk_gated_delta_rule():
    """FLA's undispatched chunk_gated_delta_rule (imports fla)."""
    from fla.ops.gated_delta_rule import chunk as fla_chunk

    fn = inspect.unwrap(fla_chunk.chunk_gated_delta_rule)
    if not _is_dispatch_free(fn):
        raise RuntimeError(
            "cannot reach FLA's own chunk_gated_delta_rule behind its backend dispatch "
            f"(got {getattr(fn, '__qualname__', fn)!r} from {getattr(fn, '__module__', '?')}); "
            "this FLA version is not supported by the 'fla' backend"
        )
    return fn


@functools.cache
def fla_supports_gva() -> bool:
    """FLA >= 0.5 takes q/k with fewer heads than v (grouped value heads)."""
    import fla

    return Version(getattr(fla, "__version__", "0")).release >= (0, 5)


def fla_forwards_to_flashqla() -> bool:
    """Whether FLA's public chunk_gated_delta_rule would forward to FlashQLA in this process."""
    from slime_flashqla.host.packages import is_installed

    if not (is_installed("fla") and is_installed("flash_qla")):
        return False
    if os.environ.get("FLA_DISABLE_BACKEND_DISPATCH") == "1":
        return False
    if os.environ.get("FLA_FLASH_QLA", "1") == "0":
        return False
    from slime_flashqla.host.packages import installed_version

    version = installed_version("fla") or "0"
    try:
        return Version(version).release >= (0, 6)
    except ValueError:
        return False


# Triton's miscompile of FLA's gated `chunk_bwd_dqkwg` on Hopper (FLA #640, #983): FLA raises
# in its Triton kernel for these versions and routes the kernel to TileLang where installed.
HOPPER_BAD_TRITON = (Version("3.4.0"), Version("3.7.1"))


def hopper_backward_problem(
    fla_version: str | None, triton_version: str | None, capability, *, tilelang: bool
) -> str | None:
    """Why FLA cannot run the GDN backward here, from versions, TileLang's presence and the capability, or None.

    One home for FLA #640 (validation refuses training with it, `doctor` warns with it). The
    backward fails after the forward ran, in FLA's RuntimeError:
    - FLA 0.5.x with Triton >= 3.4: its TileLang verifier takes no grouped value heads, so every
      Qwen GDN layer fails with or without TileLang (seen on an H200: FLA 0.5.0, Triton 3.6,
      TileLang 0.1.15);
    - FLA 0.6 with Triton in [3.4.0, 3.7.1) and no TileLang (FLA 0.6.0's `chunk_bwd_dqkwg`).
    """
    if not (fla_version and triton_version) or capability is None or capability[0] != 9:
        return None
    try:
        fla, triton = Version(fla_version), Version(triton_version)
    except ValueError:
        return None
    if fla.release[:2] == (0, 5) and triton.release >= (3, 4):
        return (
            f"flash-linear-attention {fla_version} cannot run the GDN backward on Hopper with Triton "
            f"{triton_version} (its Triton kernel refuses, FLA #640, and its TileLang one takes no grouped "
            "value heads): pip install 'flash-linear-attention>=0.6'"
        )
    low, high = HOPPER_BAD_TRITON
    if not tilelang and low <= Version(triton.base_version) < high:
        return (
            f"flash-linear-attention {fla_version} cannot run the GDN backward on Hopper with Triton "
            f"{triton_version} (>= {low}, < {high}) and no TileLang: Triton miscompiles it and FLA refuses "
            f"(FLA issues #640, #983): pip install tilelang, or use Triton >= {high}"
        )
    return None
