"""FLA's own chunk_gated_delta_rule, reached past FLA's backend dispatch.

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
    from slime_flashqla.gdn.packages import is_installed

    if not (is_installed("fla") and is_installed("flash_qla")):
        return False
    if os.environ.get("FLA_DISABLE_BACKEND_DISPATCH") == "1":
        return False
    if os.environ.get("FLA_FLASH_QLA", "1") == "0":
        return False
    from slime_flashqla.gdn.packages import installed_version

    version = installed_version("fla") or "0"
    try:
        return Version(version).release >= (0, 6)
    except ValueError:
        return False


def hopper_backward_problem(fla_version: str | None, triton_version: str | None, capability) -> str | None:
    """Why FLA cannot run the GDN backward here, from versions and the device's capability, or None.

    FLA 0.5.x refuses its Triton `chunk_bwd_dqkwg` on Hopper with Triton >= 3.4 (wrong results,
    FLA #640) and sends it to its TileLang backend, whose 0.5.x verifier takes no grouped value
    heads: every Qwen GDN layer's backward then ends in FLA's RuntimeError after the forward ran
    (seen on an H200 with FLA 0.5.0, Triton 3.6, TileLang 0.1.15). FLA 0.6 runs it.
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
    return None
