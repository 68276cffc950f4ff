"""Import a package with its module-level `@torch.compile` decorators deferred to each function's first call.

flash-qla 0.1.3 decorates its q/k l2norm with `@torch.compile` when `flash_qla` is imported.
Building that wrapper imports TorchInductor (5 s of a warm process start on an H200 host),
although this package's `flashqla` backend never calls that l2norm (it normalises q/k itself).
While the package imports, `torch.compile(fn, ...)` returns a wrapper that calls the real
`torch.compile(fn, ...)` on its first call and the compiled function from then on: what runs,
and when it compiles, is unchanged; only the import no longer pays for a compiler nobody uses.
"""

from __future__ import annotations

import functools
import importlib
import threading
from contextlib import contextmanager

_swap = threading.Lock()


def _deferred(real):
    def compile(model=None, **options):
        if model is None:  # used as @torch.compile(...): return the decorator
            return lambda fn: compile(fn, **options)
        compiled = None

        @functools.wraps(model)
        def first_call_compiles(*args, **kwargs):
            nonlocal compiled
            if compiled is None:
                compiled = real(model, **options)
            return compiled(*args, **kwargs)

        first_call_compiles.deferred_torch_compile = True  # for tests and doctor-style inspection
        return first_call_compiles

    return compile


@contextmanager
def torch_compile_deferred():
    """Within the block, `torch.compile` defers compiling (and importing its compiler) to first use."""
    import torch

    with _swap:
        real = torch.compile
        torch.compile = _deferred(real)
        try:
            yield
        finally:
            torch.compile = real


def import_deferring_torch_compile(name: str):
    """Import module `name` (if not imported yet) with its `@torch.compile` decorators deferred."""
    import sys

    if name in sys.modules:
        return sys.modules[name]
    with torch_compile_deferred():
        return importlib.import_module(name)
