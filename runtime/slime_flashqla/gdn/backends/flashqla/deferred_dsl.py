"""Import a TileLang kernel package with each decorator's rewrite of its function deferred to first use.

`@tilelang.jit` and `@T.macro` (TileLang 0.1.15) rewrite the decorated function's syntax tree
into an IR generator when the decorator runs (`tilelang.language.eager.builder` calls
`mutate(fn)`): parse, transform, unparse and compile, all Python holding the GIL. For flash-qla
0.1.3's ten factories that is almost all of `import flash_qla` (docs/benchmarks.md), on the
kernel preload's thread, which is what the first training step waits for. The generator is only
needed to build a program from the factory's own body ("eager style"). Every FlashQLA factory
returns an inner `@T.prim_func` instead ("lazy style"): TileLang builds its program by calling the
function, never the generator; and a kernel loaded from a recorded program
(kernels/tilelang_specs.py) builds no program at all.

So, while the package imports on this thread, `mutate(fn)` returns a `DeferredRewrite`: the real
rewrite runs the first time anything reads the generator, once, under a lock. The decorator itself
reads one thing at once, `extra_type_hints` (arguments annotated inside a body, `A: T.Tensor`); a
function whose source holds such an annotation is rewritten at once, as without this module, and
every other function's hints are empty, which is what the rewrite would find.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import inspect
import textwrap
import threading
from contextlib import contextmanager

_BUILDER = "tilelang.language.eager.builder"  # the module whose `mutate` the decorators call
_swap = threading.Lock()


def annotates_own_arguments(func) -> bool:
    """Whether a def in func's source annotates one of its own arguments in its body, as TileLang's rewrite reads."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(func)))
    except (OSError, TypeError, SyntaxError):
        return True  # no source to read here: the rewrite decides, at once
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            arguments = node.args
            names = {argument.arg for argument in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs)} | {
                argument.arg for argument in (arguments.vararg, arguments.kwarg) if argument is not None
            }
            for statement in node.body:
                if (
                    isinstance(statement, ast.AnnAssign)
                    and statement.value is None
                    and isinstance(statement.target, ast.Name)
                    and statement.target.id in names
                ):
                    return True
    return False


class DeferredRewrite:
    """TileLang's IR generator for one function, built by the real `mutate` the first time it is read."""

    def __init__(self, rewrite, func) -> None:
        self.extra_type_hints: dict = {}  # what the rewrite finds where `annotates_own_arguments` is False
        self._rewrite, self._func = rewrite, func
        self._lock = threading.Lock()
        self._built = None

    def built(self):
        """The real generator (rewritten now if it was not yet)."""
        with self._lock:
            if self._built is None:
                self._built = self._rewrite(self._func)
        return self._built

    def __getattr__(self, name):
        # Only names this object lacks reach here: `gen`, `source`, whatever TileLang reads later.
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.built(), name)


def _deferring(rewrite, thread: int):
    @functools.wraps(rewrite)
    def mutate(func):
        # Another thread importing or building meanwhile gets the real rewrite.
        if threading.get_ident() != thread or annotates_own_arguments(func):
            return rewrite(func)
        return DeferredRewrite(rewrite, func)

    return mutate


@contextmanager
def tilelang_rewrite_deferred():
    """Within the block, TileLang decorators running on this thread defer their rewrite to first use.

    Where TileLang is not installed, or has no `mutate` where 0.1.15 has it, the block changes nothing.
    """
    if importlib.util.find_spec("tilelang") is None:
        yield
        return
    builder = importlib.import_module(_BUILDER)
    rewrite = getattr(builder, "mutate", None)
    if not callable(rewrite):
        yield
        return
    with _swap:
        builder.mutate = _deferring(rewrite, threading.get_ident())
        try:
            yield
        finally:
            builder.mutate = rewrite
