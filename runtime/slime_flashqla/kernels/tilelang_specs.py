"""A kernel package's TileLang specialisations: recorded after `warmup` loaded them, loaded again on a preload thread.

A `@tilelang.jit` factory (FlashQLA 0.1.3 has ten) makes one kernel per call form. Its first
call in a process with a new form builds the kernel's program in Python (the slow part: the
factory's body runs TileLang's front end), hashes the program's text to find the kernel in the
disk cache, and loads the kernel. `record` writes, for every form a warm-up process called:
the form, the disk-cache entry the kernel came from, and the program itself (TVM's JSON of it,
checked to print the same text, so it names the same cache entry). A `TileLangSpecialisation`
then does that first call's work ahead of time on another thread:

- `prepare()` reads the recorded program into the specialisation itself;
- `load()` loads the kernel through TileLang's disk cache from that program (or, without one,
  through the factory's own `compile`) and files it where the factory's next call looks first.
  It never calls the factory itself: the factory's last-call shortcut is three attributes written
  one after another, and a second thread writing them could hand the training thread another
  form's kernel.

A recorded program never goes where the factory looks for built ones (its phase-1 cache):
TileLang 0.1.15 compiles a program read back from JSON wrongly (its layout annotations fail
layout inference, `test_tilelang_specs` shows it), so a training thread that found one there and
missed the disk cache would fail instead of compiling. A load never compiles: the recorded cache
entry must still be complete, and while a preload runs, TileLang's own "begins to compile" log
line raises `CompileRefused` in the preload thread before any compile work starts.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib
import json
import logging
import os
import sys
import threading
from collections.abc import Iterable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from slime_flashqla.errors import one_line
from slime_flashqla.kernels.compile_log import TILELANG_COMPILE
from slime_flashqla.kernels.tilelang_prefetch import compile_ahead as _compile_ahead

if TYPE_CHECKING:
    from slime_flashqla.gdn.backends.tooling import TileLangSource

PROGRAMS = "programs"  # under the record directory: <cache key>.json.gz
KERNEL_LOGGER = "tilelang.jit.kernel"  # where JITKernel logs a real compile (tilelang/jit/kernel.py)


class CompileRefused(RuntimeError):
    """TileLang was about to compile a kernel in a preload thread."""


class UnrecordableValue(TypeError):
    """A factory argument this module cannot write as JSON."""


def encode_value(value):
    """A factory argument as JSON (ints, floats, bools, strings, None, torch dtypes)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    import torch

    if isinstance(value, torch.dtype):
        return {"torch.dtype": str(value).removeprefix("torch.")}
    raise UnrecordableValue(f"cannot record a {type(value).__name__} argument")


def decode_value(value):
    """The factory argument `encode_value` wrote."""
    if isinstance(value, dict):
        import torch

        dtype = getattr(torch, value["torch.dtype"])
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"torch.{value['torch.dtype']} is not a dtype")
        return dtype
    return value


def _jit_impl_type():
    module = sys.modules.get("tilelang.jit")
    return getattr(module, "JITImpl", None) if module is not None else None


def factory_name(impl) -> str:
    """'module:qualname' of the function a factory wraps (where `resolve_factory` finds it again)."""
    function = impl.func.orig_func
    return f"{function.__module__}:{function.__qualname__}"


def jit_factories(package: str) -> dict[str, object]:
    """The package's imported `@tilelang.jit` factories by `factory_name` (imports nothing)."""
    impl_type = _jit_impl_type()
    if impl_type is None:
        return {}
    found = {}
    for name, module in list(sys.modules.items()):
        if module is None or not (name == package or name.startswith(package + ".")):
            continue
        for value in list(vars(module).values()):
            if isinstance(value, impl_type):
                found.setdefault(factory_name(value), value)
    return found


def resolve_factory(name: str):
    """The factory `factory_name` named (its module is imported if it is not yet)."""
    module_name, _, qualname = name.partition(":")
    value = importlib.import_module(module_name)
    for part in qualname.split("."):
        value = getattr(value, part)
    impl_type = _jit_impl_type()
    if impl_type is None or not isinstance(value, impl_type):
        raise LookupError(f"{name} is not a @tilelang.jit factory")
    return value


def source_digest(impl) -> str:
    """sha256 of the factory's Python source: a recorded program only fits the source it was built from."""
    return hashlib.sha256(impl.func_source.encode()).hexdigest()


def call_forms(factories: dict[str, object]) -> set[tuple[str, tuple, tuple]]:
    """Every (factory, args, kwargs items) the factories have built a kernel for in this process."""
    return {(name, *form) for name, impl in factories.items() for form in list(impl._call_form_cache.entries)}


def _template(impl, args: tuple, kwargs: dict):
    """The factory's built program for this call form, or None (TileLang's phase-1 template cache)."""
    key = impl.func._argument_binder.bind(args, kwargs).p1_key
    template = impl.func.p1_cache.get(key)
    return key, template


def _write_atomically(path: Path, data: bytes) -> None:
    partial = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    partial.write_bytes(data)
    os.replace(partial, path)


def save_program(impl, args: tuple, kwargs: dict, path: Path) -> bool:
    """Write the built program of this call form to `path` (gzip'd TVM JSON); False when there is none to write.

    The JSON is read back and must print exactly the same text with its metadata, which is what
    TileLang hashes into the cache key: a program that would not find the same entry is not written.
    """
    import tvm

    _, template = _template(impl, args, kwargs)
    if template is None or not template.is_lazy_style:
        return False
    if path.exists():
        return True  # the same cache key: the same program, checked by the process that wrote it
    program = template.prim_func
    text = tvm.ir.save_json(program)
    if _from_json(text).script(show_meta=True) != program.script(show_meta=True):
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_atomically(path, gzip.compress(text.encode(), compresslevel=6))
    return True


def _from_json(text: str):
    """TVM's object of JSON that this TVM's `save_json` wrote.

    Straight through TVM's loader: `tvm.ir.load_json` first round-trips the whole text through
    Python's json module to upgrade older formats, which was most of a preload's reading of its
    programs (docs/benchmarks.md); a record names the stack it was written on, so its format is this one.
    """
    import tvm

    return tvm.get_global_func("node.LoadJSON")(text)


def load_program(path: Path):
    """The program `save_program` wrote."""
    return _from_json(gzip.decompress(path.read_bytes()).decode())


def record(
    factories: dict[str, object], before: set, cache_dir: Path, record_dir: Path
) -> tuple[list[dict], list[str]]:
    """The call forms built since `before`, as JSON specs, and one line per form that could not be recorded.

    Programs go to `record_dir/programs/`; cache entries are named relative to `cache_dir`, so a
    cache moved whole (`slime-flashqla cache export/import`) keeps its records.
    """
    specs, problems = [], []
    cache_dir = Path(cache_dir).resolve()
    for name, impl in sorted(factories.items()):
        for (args, kwargs_items), kernel in list(impl._call_form_cache.entries.items()):
            if (name, args, kwargs_items) in before:
                continue
            try:
                specs.append(_spec(name, impl, args, kwargs_items, kernel, cache_dir, record_dir))
            except Exception as error:  # that one is not preloaded; the warm-up itself went through
                problems.append(f"{name.rpartition(':')[2]}: {one_line(error)}")
    return specs, problems


def _spec(name, impl, args, kwargs_items, kernel, cache_dir: Path, record_dir: Path) -> dict:
    entry = Path(kernel._tilelang_cache_path).resolve()
    if not entry.is_relative_to(cache_dir):
        raise ValueError(f"its kernel {entry} is outside the cache {cache_dir}")
    key = kernel._tilelang_cache_key
    program = Path(PROGRAMS) / f"{key}.json.gz"
    saved = save_program(impl, args, dict(kwargs_items), record_dir / program)
    return {
        "factory": name,
        "source_sha256": source_digest(impl),
        "args": [encode_value(value) for value in args],
        "kwargs": [[key_name, encode_value(value)] for key_name, value in kwargs_items],
        "cache_key": key,
        "cache_entry": entry.relative_to(cache_dir).as_posix(),
        "entry_files": sorted(item.name for item in entry.iterdir() if item.is_file()),
        "program": program.as_posix() if saved else None,
    }


def spec_identity(spec: dict) -> str:
    """What makes two recorded specs the same call form of the same factory."""
    return json.dumps([spec["factory"], spec["args"], spec["kwargs"]])


class _RefuseCompiles(logging.Handler):
    """Raises CompileRefused where TileLang logs that it begins a compile, in one thread only."""

    def __init__(self, thread: threading.Thread) -> None:
        super().__init__(logging.NOTSET)
        self.thread = thread

    def filter(self, record: logging.LogRecord) -> bool:
        # Logging calls a handler's filter outside any try: the exception leaves TileLang's
        # logger.info() call, before the compile it announces.
        if threading.current_thread() is self.thread:
            match = TILELANG_COMPILE.search(record.getMessage())
            if match:
                raise CompileRefused(f"TileLang would compile {match.group(1)}")
        return False

    def emit(self, record: logging.LogRecord) -> None:  # filter() lets nothing through
        pass


def compile_guard_problem() -> str | None:
    """Why the compile guard could not see a compile here, or None (call after tilelang is imported)."""
    from tilelang.env import env

    if not env.is_print_on_compilation_enabled():
        return "TILELANG_PRINT_ON_COMPILATION is off, so a compile could not be refused"
    if not logging.getLogger(KERNEL_LOGGER).isEnabledFor(logging.INFO):
        return f"the {KERNEL_LOGGER!r} logger is above INFO, so a compile could not be refused"
    return None


@contextmanager
def refusing_compiles():
    """Within the block, a TileLang compile started by this thread raises CompileRefused instead."""
    logger = logging.getLogger(KERNEL_LOGGER)
    handler = _RefuseCompiles(threading.current_thread())
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)


@dataclass
class TileLangSpecialisation:
    """One recorded call form of one factory, to load ahead of its first use."""

    spec: dict
    cache_dir: Path
    record_dir: Path
    use_program: bool = True
    _program: object = field(default=None, init=False, repr=False, compare=False)

    @property
    def label(self) -> str:
        return self.spec["factory"].rpartition(":")[2]

    def problem(self) -> str | None:
        """Why this spec cannot be loaded without a compile or a mismatch, or None."""
        entry = self.cache_dir / self.spec["cache_entry"]
        missing = [name for name in self.spec["entry_files"] if not (entry / name).is_file()]
        if missing:
            return f"its cache entry {self.spec['cache_key'][:12]} lacks {', '.join(missing)}"
        try:
            impl = resolve_factory(self.spec["factory"])
        except (ImportError, AttributeError, LookupError) as error:
            return f"no factory {self.spec['factory']} ({error})"
        if source_digest(impl) != self.spec["source_sha256"]:
            return f"{self.label}'s source changed since it was recorded"
        return None

    def _call(self):
        impl = resolve_factory(self.spec["factory"])
        args = tuple(decode_value(value) for value in self.spec["args"])
        kwargs = {name: decode_value(value) for name, value in self.spec["kwargs"]}
        return impl, args, kwargs

    def prepare(self) -> bool:
        """Read the recorded program, for this specialisation's own load; False when there is none to read."""
        if not (self.use_program and self.spec.get("program")):
            return False
        self._program = load_program(self.record_dir / self.spec["program"])
        return True

    def load(self) -> bool:
        """Load the kernel from the disk cache into the factory's kernel cache; False when it was there already.

        Call within `refusing_compiles()`.
        """
        impl, args, kwargs = self._call()
        key, _ = impl.func.parse_args(*args, **kwargs)
        if key in impl._kernel_cache:
            return False
        # Without a recorded program, the factory builds it (on this thread).
        kernel = impl.compile(*args, **kwargs) if self._program is None else compile_program(impl, self._program)
        impl._kernel_cache.setdefault(key, kernel)  # one dict write: the training thread may be reading
        return True


def compile_program(impl, program):
    """The kernel of `program` through TileLang's compile (disk cache first), as the factory's `compile` calls it."""
    from tilelang.jit import compile as tilelang_compile

    return tilelang_compile(
        program,
        out_idx=impl.out_idx,
        execution_backend=impl.execution_backend,
        target=impl.target,
        target_host=impl.target_host,
        verbose=impl.verbose,
        pass_configs=impl.pass_configs,
        compile_flags=impl.compile_flags,
    )


def specialisations(
    specs: Iterable[dict], cache_dir: Path, record_dir: Path, use_program: bool
) -> list[TileLangSpecialisation]:
    """The specs as loadable specialisations, in order."""
    return [TileLangSpecialisation(spec, Path(cache_dir), Path(record_dir), use_program) for spec in specs]


@dataclass(frozen=True)
class TileLangPackage:
    """What a backend's `TileLangSource` declares, as the source of its recorded specialisations.

    A `SpecialisationSource` (kernels/preload.py).
    """

    declared: TileLangSource  # the package and its importer

    def installed(self) -> bool:
        """Whether the package can be imported here (found, not imported)."""
        from slime_flashqla.host.packages import is_installed

        return is_installed(self.declared.package)

    def snapshot(self) -> set:
        """The call forms built so far in this process."""
        return call_forms(jit_factories(self.declared.package))

    def record(self, before: set, cache_dir: Path, record_dir: Path) -> tuple[list[dict], list[str]]:
        """The call forms built since `before` (see `record`)."""
        return record(jit_factories(self.declared.package), before, cache_dir, record_dir)

    def specialisations(self, specs: list[dict], cache_dir: Path, record_dir: Path, use_program: bool):
        """Import the package (as its backend does) and return the specs as loadable specialisations."""
        self.declared.importer()
        return specialisations(specs, cache_dir, record_dir, use_program)

    def compile_ahead(self, steps, threads: int, lock):
        """Import the package, find the kernels `steps()` calls and compile them on `threads` threads (a Prefetch)."""
        self.declared.importer()
        return _compile_ahead(
            self.declared.package, steps, threads, lock, name_of=factory_name, compile_fn=compile_program
        )

    guard_problem = staticmethod(compile_guard_problem)
    guard = staticmethod(refusing_compiles)
    refusal = CompileRefused  # what a load raises inside `guard` where it would compile
