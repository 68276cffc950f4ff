"""Import a package with its module-level `@torch.compile` decorators deferred to each function's first call.

flash-qla 0.1.3 decorates its q/k l2norm with `@torch.compile` when `flash_qla` is imported.
Building that wrapper imports TorchInductor (seconds of a warm process start: docs/benchmarks.md),
although this package's `flashqla` backend never calls that l2norm (it normalises q/k itself).
While the package imports, `torch.compile(fn, ...)` returns a wrapper that calls the real
`torch.compile(fn, ...)` on its first call and the compiled function from then on: what runs,
and when it compiles, is unchanged; only the import does not pay for a compiler nobody uses.

The same package marks `chunk_gated_delta_rule` with `@torch.compiler.disable`, and building
that marker imports TorchDynamo, and with it sympy and parts of Inductor (about half the
kernel-package imports of a warm process: docs/benchmarks.md). Disabling
Dynamo for a function only matters while Dynamo runs, and Dynamo cannot run before
`torch._dynamo` is imported: so the deferred marker calls the function as it is until then,
and through the real `torch.compiler.disable(fn)` once Dynamo is loaded, which is what keeps a
`torch.compile`d caller out of it; Dynamo's own `_torchdynamo_disable` flag on the marker also
spares Dynamo inlining the marker itself.

TileLang's own decorators are deferred alongside (deferred_dsl.py): `import_deferring_decorators`
imports with both.
"""

from __future__ import annotations

import functools
import importlib
import sys
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


def _deferred_disable(real):
    def disable(fn=None, recursive=True, *, reason=None):
        if fn is None:  # used as @torch.compiler.disable(...): return the decorator
            return lambda inner: disable(inner, recursive, reason=reason)
        disabled = None

        @functools.wraps(fn)
        def dynamo_disabled(*args, **kwargs):
            nonlocal disabled
            if disabled is None:
                if "torch._dynamo" not in sys.modules:
                    return fn(*args, **kwargs)  # no Dynamo loaded, so nothing is tracing this call
                disabled = real(fn, recursive, reason=reason)
            return disabled(*args, **kwargs)

        # Dynamo reads these (inspect.getattr_static) to skip inlining a disabled function.
        dynamo_disabled._torchdynamo_disable = True
        dynamo_disabled._torchdynamo_disable_msg = reason
        dynamo_disabled.deferred_torch_compile = True
        return dynamo_disabled

    return disable


def _in_thread(thread: int, deferred, real):
    @functools.wraps(real)
    def choose(*args, **kwargs):
        # The swap is process-wide, but only the importing thread asked for it: a model being
        # built on another thread meanwhile gets the real torch.compile (an OptimizedModule).
        return (deferred if threading.get_ident() == thread else real)(*args, **kwargs)

    return choose


@contextmanager
def torch_compile_deferred():
    """Within the block, this thread's `torch.compile` and `torch.compiler.disable` defer the compiler to first use."""
    import torch
    import torch.compiler

    with _swap:
        real_compile, real_disable = torch.compile, torch.compiler.disable
        thread = threading.get_ident()
        torch.compile = _in_thread(thread, _deferred(real_compile), real_compile)
        torch.compiler.disable = _in_thread(thread, _deferred_disable(real_disable), real_disable)
        try:
            yield
        finally:
            torch.compile, torch.compiler.disable = real_compile, real_disable


def import_deferring_decorators(name: str):
    """Import module `name` (if not imported yet) with its `@torch.compile` and TileLang decorators' work deferred."""
    from slime_flashqla.gdn.backends.flashqla.deferred_dsl import tilelang_rewrite_deferred

    if name in sys.modules:
        # Not sys.modules[name]: while another thread imports it (a kernel preload), that is a
        # half-run module; import_module waits for the import to finish, as `import` does.
        return importlib.import_module(name)
    with torch_compile_deferred(), tilelang_rewrite_deferred():
        return importlib.import_module(name)
