"""Compile the TileLang kernels some steps will call on several threads, before the steps run them one by one.

A kernel package built from lazy `@tilelang.jit` factories (FlashQLA) asks for each kernel by
calling its factory with plain values (head counts, dtypes, flags, block sizes) and then launches
it on buffers it has allocated itself; the factory compiles on the first call of each form. So a
warm-up part compiles its kernels one after another, each when its step first needs it. Here:

1. `discovering()` runs the steps with every such factory call answered by a kernel that
   launches nothing, and notes each call form. FlashQLA 0.1.3 allocates every kernel's outputs
   with torch.empty and never reads a value back on the host, so its Python runs through whole
   (read from the wheel; tests/runtime/kernels/test_tilelang_prefetch.py runs it on a CPU).
2. `compile_forms()` builds each form's program on this thread (TileLang's front end, Python),
   then compiles the programs on a pool of threads through TileLang's disk-cached compile, as
   `tilelang.jit.par_compile` does (TileLang 0.1.15: its lowering releases the GIL and nvcc is a
   subprocess, so threads run in parallel; the cache writes each entry through an atomic rename),
   and files each kernel where the factory's next call of that form finds it.

Then the steps run for real and find their kernels built. A form the discovery missed, or one
whose compile failed here, the steps compile as they would have. Each compile holds a lock named
after its form (`lock`), so parts and ranks that need the same kernel at once compile it once.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

from slime_flashqla.errors import one_line


@dataclass
class Prefetch:
    """What compiling ahead did."""

    forms: int = 0  # call forms the discovery found
    compiled: int = 0  # kernels built here (compiled, or loaded from the cache another process filled)
    present: int = 0  # already in the factory's memory
    threads: int = 1
    failed: list[str] = field(default_factory=list)  # one line per form left to the steps
    note: str = ""  # why the discovery stopped early, if it did
    discover_s: float = 0.0
    build_s: float = 0.0  # building the programs, on one thread
    compile_s: float = 0.0  # the compile pool, wall clock

    def describe(self) -> str:
        """One line for the warm-up's result."""
        text = (
            f"{self.compiled} of {self.forms} kernel(s) built ahead on {self.threads} thread(s) "
            f"(found in {self.discover_s:.1f} s, programs {self.build_s:.1f} s, compiles {self.compile_s:.1f} s)"
        )
        if self.failed:
            text += f"; {len(self.failed)} left to the steps ({self.failed[0]})"
        if self.note:
            text += f"; {self.note}"
        return text


def _lazy_form(impl) -> bool:
    """Whether a factory call returns a kernel without running it (a lazy factory with no tensor arguments)."""
    func = impl.func
    return not getattr(func, "tensor_args", True) and impl.mode in ("auto", "lazy")


class _NoLaunch:
    """Stands in for a kernel during discovery: called with the step's buffers, it does nothing."""

    def __call__(self, *args, **kwargs) -> None:
        return None


@contextmanager
def discovering(package: str, name_of):
    """Within the block, `package`'s lazy TileLang factories note each call form and launch nothing; yields the forms.

    Process-wide while it lasts: run it where no other thread calls TileLang (a warm-up part).
    `name_of(factory)` names a factory 'module:qualname' (tilelang_specs.factory_name).
    """
    from tilelang.jit import JITImpl

    forms: dict[tuple, object] = {}  # (name, args, kwargs items) -> the factory, in first-call order
    real_call = JITImpl.__call__

    def noting(impl, *args, **kwargs):
        name = name_of(impl)
        if not (name.startswith(package + ".") and _lazy_form(impl)) or kwargs.get("__tune_params"):
            return real_call(impl, *args, **kwargs)
        forms.setdefault((name, args, tuple(kwargs.items())), impl)
        return _NoLaunch()

    JITImpl.__call__ = noting
    try:
        yield forms
    finally:
        JITImpl.__call__ = real_call


def form_lock_key(name: str, args: tuple, kwargs_items: tuple) -> str:
    """A file-name-safe key of one call form, the same in every process (its values: numbers, strings, dtypes)."""
    return "form-" + hashlib.sha256(repr((name, args, kwargs_items)).encode()).hexdigest()[:32]


def compile_forms(forms: dict[tuple, object], threads: int, lock, compile_fn) -> Prefetch:
    """Build every form's program here, compile them on `threads` threads, file each kernel for the factory.

    `lock(key)` is a context manager held around each compile; `compile_fn(impl, program)` compiles
    (tilelang_specs.compile_program: TileLang's disk-cached compile with the factory's settings).
    """
    result = Prefetch(forms=len(forms), threads=threads)
    began = time.perf_counter()
    work = []
    for (name, args, kwargs_items), impl in forms.items():
        kwargs = dict(kwargs_items)
        key, _ = impl.func.parse_args(*args, **kwargs)
        if key in impl._kernel_cache:
            result.present += 1
            continue
        try:
            # TileLang's front end, one program at a time on this thread, as par_compile elaborates.
            program = impl.get_tir(*args, **kwargs)
        except Exception as error:
            result.failed.append(f"{name.rpartition(':')[2]}: {type(error).__name__}: {one_line(error)}")
            continue
        work.append((name, impl, key, program, form_lock_key(name, args, kwargs_items)))
    result.build_s = time.perf_counter() - began

    def build(item):
        _, impl, _, program, lock_key = item
        with lock(lock_key):
            return compile_fn(impl, program)

    began = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max(1, threads), thread_name_prefix="slime-flashqla-compile") as pool:
        futures = {pool.submit(build, item): item for item in work}
        for future in concurrent.futures.as_completed(futures):
            name, impl, key, _, _ = futures[future]
            try:
                kernel = future.result()
            except Exception as error:  # the steps compile it again, and report what fails
                result.failed.append(f"{name.rpartition(':')[2]}: {type(error).__name__}: {one_line(error)}")
                continue
            impl._kernel_cache.setdefault(key, kernel)  # where the factory's next call of this form looks
            result.compiled += 1
    result.compile_s = time.perf_counter() - began
    return result


def compile_ahead(package: str, steps, threads: int, lock, *, name_of, compile_fn) -> Prefetch:
    """Discover the forms `steps()` calls of `package`'s factories, then compile them on `threads` threads."""
    began, note = time.perf_counter(), ""
    with discovering(package, name_of) as forms:
        try:
            steps()
        except Exception as error:  # what it found so far is still worth compiling; the steps do the rest
            note = f"discovery stopped early: {one_line(error)}"
    seconds = time.perf_counter() - began
    result = compile_forms(forms, threads, lock, compile_fn)
    result.discover_s, result.note = seconds, note
    return result
