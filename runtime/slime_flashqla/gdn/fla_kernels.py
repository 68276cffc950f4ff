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
