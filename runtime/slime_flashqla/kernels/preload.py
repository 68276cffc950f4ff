"""Load the kernel specialisations `warmup` recorded, on a background thread, before a training step first needs them.

After `warmup`, no kernel compiles in training, but the first use in a process of a FlashQLA
specialisation (another CP path or value block than the first step's) still costs that step
what building the kernel's program and loading it does. So:

- `warmup` records, next to the cache (`<cache>/slime-flashqla-preload/`), every specialisation
  its `layer` part loaded, with the program it was built from (`recording`);
- a GDN layer's construction calls `start_kernel_preload(backend, Hk, Hv)`, which starts (once
  per process and head configuration) a daemon thread that imports the backend's kernel
  package and loads what was recorded for those heads, so the steps find it loaded.

The thread never blocks the caller and never raises into it: a problem ends the preload with one
logged line (logger `slime_flashqla.kernels.preload`). It loads only what was recorded on this
machine's stack (the fingerprint of kernels/fingerprint.py, which an archive records too) and is
still in the cache, and refuses any compile (see kernels/tilelang_specs.py): a specialisation that
would compile is skipped, said in that line, and the rest still loaded. A training step that
needs a kernel before the preload reached it (or one it skipped) builds it itself, as it would
without the preload, from the recorded program when the preload has filed it already.
`SLIME_FLASHQLA_PRELOAD=0` turns it off; `=calls` preloads without the recorded programs (each
one is built again).
"""

from __future__ import annotations

import atexit
import functools
import json
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from slime_flashqla.errors import one_line
from slime_flashqla.files.atomic import write_atomically
from slime_flashqla.kernels.cache import tilelang_cache_dir
from slime_flashqla.kernels.fingerprint import differences, fingerprint

PRELOAD_ENV = "SLIME_FLASHQLA_PRELOAD"
ON, CALLS, OFF = "on", "calls", "off"
_MODES = {"": ON, "1": ON, "on": ON, "calls": CALLS, "0": OFF, "off": OFF}
LAYER = "layer"  # the warm-up part that runs the GDN layer: what a layer preloads is what it recorded
RECORD_DIR = "slime-flashqla-preload"  # in the TileLang cache directory, beside the kernels it names
FORMAT = "slime-flashqla-preload/1"

logger = logging.getLogger(__name__)


class PreloadSettingError(ValueError):
    """SLIME_FLASHQLA_PRELOAD holds a value this module does not know."""


def preload_mode(environ=None) -> str:
    """`on`, `calls` or `off`, from SLIME_FLASHQLA_PRELOAD (unset: on)."""
    value = (os.environ if environ is None else environ).get(PRELOAD_ENV, "").strip().lower()
    if value not in _MODES:
        raise PreloadSettingError(
            f"{PRELOAD_ENV}={value!r}: use 1 (preload, the default), 0 (no preload) or calls "
            "(preload without the recorded programs)"
        )
    return _MODES[value]


def preload_setting(environ=None) -> str:
    """SLIME_FLASHQLA_PRELOAD as `doctor` shows it: the mode and the value, or INVALID and how to fix it."""
    environ = os.environ if environ is None else environ
    try:
        mode = preload_mode(environ)
    except PreloadSettingError as error:
        return f"INVALID: {error}"
    value = environ.get(PRELOAD_ENV)
    return f"{mode} ({PRELOAD_ENV} unset)" if value is None else f"{mode} ({PRELOAD_ENV}={value!r})"


def record_dir(cache_dir) -> Path:
    """Where `warmup` writes what a preload may load."""
    return Path(cache_dir) / RECORD_DIR


class Specialisation(Protocol):
    """One recorded specialisation, ready to load (tilelang_specs.TileLangSpecialisation)."""

    label: str

    def problem(self) -> str | None:
        """Why it can no longer be loaded (its cache entry is gone), or None."""

    def prepare(self) -> bool:
        """Read what the load needs (the recorded program); True when a recorded program was read."""

    def load(self) -> bool:
        """Load the kernel; False when the training thread had loaded it already (raises its source's `refusal`)."""


@runtime_checkable
class SpecialisationSource(Protocol):
    """What records a backend's kernel specialisations in `warmup` and loads them in a preload.

    A backend declares one (FlashQLA's `TileLangSource`, made a tilelang_specs.TileLangPackage).
    """

    refusal: type[Exception]  # what a load raises where it would compile: that one is skipped, the rest loaded

    def installed(self) -> bool:
        """Whether its kernel package is installed here (found without importing it)."""

    def snapshot(self) -> set:
        """What the process has built so far."""

    def record(self, before: set, cache_dir: Path, record_dir: Path) -> tuple[list[dict], list[str]]:
        """The specs built since `before` (programs written under `record_dir`), and one line per one not recorded."""

    def specialisations(
        self, specs: list[dict], cache_dir: Path, record_dir: Path, use_program: bool
    ) -> list[Specialisation]:
        """The specs, loadable (imports the kernel package); `use_program`: through their recorded programs."""

    def guard_problem(self) -> str | None:
        """Why loads cannot be kept from compiling here, or None."""

    def guard(self) -> AbstractContextManager:
        """The context the loads run in: a compile inside it raises."""

    def compile_ahead(self, steps: Callable[[], object], threads: int, lock):
        """Compile what `steps()` calls on `threads` threads first; something with `describe()`."""


def kernel_source(backend: str) -> SpecialisationSource | None:
    """The backend's source of recorded specialisations, or None (it keeps none)."""
    return _source(backend)


@functools.cache
def _source(backend: str) -> SpecialisationSource | None:
    """What the backend declares (a TileLangSource, or None) as the object that records and loads its programs.

    None for a name no backend has: a preload is never the place a wrong backend name is refused.
    """
    from slime_flashqla.gdn.backends import KERNEL_BACKENDS

    declared = KERNEL_BACKENDS[backend].tilelang if backend in KERNEL_BACKENDS else None
    if declared is None:
        return None
    from slime_flashqla.kernels.tilelang_specs import TileLangPackage

    return TileLangPackage(declared)


def _write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps(data, indent=1) + "\n")  # a temporary name `cache export` skips


@contextmanager
def recording(task, cache_dir):
    """Record the specialisations a layer part of `warmup` loads in the block, for a later preload of them.

    Never raises for the recording itself: a warm-up is not failed because its record could not
    be written (one warning line says so, and a later preload then has less to load).
    """
    source = kernel_source(task.backend)
    # What a layer preloads is what the layer's own steps built. The forced kernel paths also
    # build what FlashQLA's choice never picked for a warmed pack; the state variants are
    # `check`'s (a layer passes no state).
    if source is None or task.part != LAYER:
        yield
        return
    try:
        before, problem = source.snapshot(), None
    except Exception as error:  # another TileLang: the warm-up runs, unrecorded
        before, problem = None, one_line(error)
    yield
    if problem is not None:
        logger.warning("warmup %s: its kernels were not recorded for preloading: %s", task.key, problem)
        return
    try:
        specs, problems = source.record(before, Path(cache_dir), record_dir(cache_dir))
        _write_json(
            record_dir(cache_dir) / f"{task.key}.json",
            {
                "format": FORMAT,
                "task": task.key,
                "backend": task.backend,
                "key_heads": task.heads.key_heads,
                "value_heads": task.heads.value_heads,
                "dtype": task.dtype,
                "varlen": task.varlen,
                "part": task.part,
                "stack": fingerprint(),  # kernels/fingerprint.py: what an archive records too
                "specialisations": specs,
            },
        )
    except Exception as error:  # the warm-up itself succeeded
        logger.warning("warmup %s: its kernels were not recorded for preloading: %s", task.key, one_line(error))
        return
    if problems:
        logger.warning(
            "warmup %s: %d kernel specialisation(s) not recorded for preloading (%s)",
            task.key,
            len(problems),
            problems[0],
        )


def recorded_specs(cache_dir, backend: str, key_heads: int, value_heads: int) -> list[tuple[dict, dict]]:
    """(stack, spec) for every spec a layer part of `warmup` recorded for these heads on `backend`; common first.

    A spec that more records hold (other dtypes, other token budgets) comes first, then each in
    the order its record lists it.
    """
    counts, first = Counter(), {}
    for path in sorted(record_dir(cache_dir).glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # a record being replaced, or not ours
        if not isinstance(data, dict) or (
            data.get("format") != FORMAT
            or data.get("backend") != backend
            or (data.get("key_heads"), data.get("value_heads")) != (key_heads, value_heads)
            or data.get("part") != LAYER
        ):
            continue
        for spec in data.get("specialisations", []):
            identity = json.dumps(spec, sort_keys=True)
            counts[identity] += 1
            first.setdefault(identity, (data.get("stack", {}), spec))
    return [first[identity] for identity in sorted(first, key=lambda identity: -counts[identity])]


@dataclass
class PreloadResult:
    """What one preload did."""

    label: str
    loaded: int = 0  # kernels this preload loaded
    present: int = 0  # already loaded (by the training thread) when the preload reached them
    programs: int = 0  # recorded programs it read
    skipped: list[str] = field(default_factory=list)  # one line per recorded spec it could not load
    note: str = ""  # why it loaded nothing or stopped early; empty when it went through
    seconds: float = 0.0
    finished: float = 0.0  # time.time() when it ended
    timings: list[tuple[str, float, float]] = field(default_factory=list)  # (label, prepare s, load s)


@dataclass
class Plan:
    """What a preload is to load, and what it left out."""

    items: list[Specialisation] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    note: str = ""
    guard: object = nullcontext  # a context manager factory the loads run in
    refusal: type[Exception] | tuple = ()  # what a load raises where it would compile (nothing: none skipped)


_one_at_a_time = threading.Lock()  # two preloads at once would only compete for the GIL and the same files


class Preloader:
    """One background preload: `plan()` runs on the thread, then every item's prepare(), then every load()."""

    def __init__(self, label: str, plan) -> None:
        self.label = label
        self._plan = plan
        self.result = PreloadResult(label)
        self._done = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Preloader:
        """Start the thread (returns at once)."""
        self._thread = threading.Thread(target=self._run, name=f"slime-flashqla preload {self.label}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop after the item in progress."""
        self._stop.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the preload ended; True when it has."""
        return self._done.wait(timeout)

    def _run(self) -> None:
        start = time.perf_counter()
        try:
            with _one_at_a_time:
                self._work()
        except Exception as error:  # never into training: the preload ends with one line
            self.result.note = f"stopped: {one_line(error)}"
        finally:
            self.result.seconds, self.result.finished = time.perf_counter() - start, time.time()
            try:
                self._report()
            finally:
                self._done.set()  # after the report: a waiter finds the line logged

    def _work(self) -> None:
        plan = self._plan()
        self.result.skipped, self.result.note = list(plan.skipped), plan.note
        timings = []
        with plan.guard():
            for item in plan.items:
                if self._stop.is_set():
                    self.result.note = "stopped early: the process is exiting"
                    return
                began = time.perf_counter()
                self.result.programs += bool(item.prepare())
                timings.append([item.label, time.perf_counter() - began, 0.0])
            for index, item in enumerate(plan.items):
                if self._stop.is_set():
                    self.result.note = "stopped early: the process is exiting"
                    return
                began = time.perf_counter()
                try:
                    if item.load():
                        self.result.loaded += 1
                    else:
                        self.result.present += 1
                except plan.refusal as refused:
                    # One spec whose recorded program no longer names its cache entry: the training
                    # step that needs it builds it itself; the others are still worth loading.
                    self.result.skipped.append(f"{item.label}: {one_line(refused)}")
                timings[index][2] = time.perf_counter() - began
                self.result.timings.append(tuple(timings[index]))

    def _report(self) -> None:
        result = self.result
        skipped = f", {len(result.skipped)} skipped ({result.skipped[0]})" if result.skipped else ""
        line = (
            f"kernel preload {self.label}: {result.loaded} loaded, {result.present} already loaded, "
            f"{result.programs} from recorded programs, in {result.seconds:.2f} s{skipped}"
        )
        if result.note:
            line += f"; {result.note}"
        # Loading less than was recorded is worth a warning; finding nothing recorded is not.
        quiet = not (result.skipped or result.note.startswith("stopped"))
        logger.log(logging.INFO if quiet else logging.WARNING, line)


_preloaders: dict[tuple, Preloader] = {}
_registry = threading.Lock()


def _after_fork_in_child() -> None:
    """A forked child has no preload thread: fresh locks (a parent's thread may hold them) and no preloads."""
    global _registry, _one_at_a_time
    _registry, _one_at_a_time = threading.Lock(), threading.Lock()
    _preloaders.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _gpu_present() -> bool:
    import torch

    return torch.cuda.is_available()  # asks the driver for a count; does not start CUDA


def _could_preload(backend: str) -> bool:
    """Whether a backend `backend` may run keeps records, its package is installed and a GPU is here (no import)."""
    if not _gpu_present():
        return False
    from slime_flashqla.gdn.backends import AUTO, KERNEL_BACKENDS

    names = list(KERNEL_BACKENDS) if backend == AUTO else [backend]
    sources = [kernel_source(name) for name in names]
    return any(source is not None and source.installed() for source in sources)


def _plan(backend: str, key_heads: int, value_heads: int, mode: str, device, cache_dir: Path) -> Plan:
    """What to preload for a layer of these heads (runs on the preload thread: imports, reads the records)."""
    if device is not None:
        import torch

        torch.cuda.set_device(device)  # the layer's device, not the new thread's default
    from slime_flashqla.gdn.backends import AUTO

    name = backend
    if backend == AUTO:
        from slime_flashqla.gdn.backends.auto import explain_auto

        name = explain_auto(key_heads=key_heads, value_heads=value_heads).backend
    source = kernel_source(name)
    if source is None:
        return Plan(note=f"the {name} backend keeps no recorded specialisations")
    recorded = recorded_specs(cache_dir, name, key_heads, value_heads)
    if not recorded:
        return Plan(note=f"none recorded in {record_dir(cache_dir)} (run slime-flashqla warmup)")
    here = fingerprint()
    fitting, stale = [], ""
    for stack, spec in recorded:
        why = _stale(stack, here)
        if why:
            stale = why
        else:
            fitting.append(spec)
    if not fitting:
        return Plan(note=f"stopped: recorded on another stack ({stale}); run slime-flashqla warmup again")
    items = source.specialisations(fitting, cache_dir, record_dir(cache_dir), use_program=mode == ON)
    problem = source.guard_problem()
    if problem:
        return Plan(note=f"stopped: {problem}")
    loadable, skipped = [], []
    for item in items:
        why = item.problem()
        if why:
            skipped.append(f"{item.label}: {why}")
        else:
            loadable.append(item)
    return Plan(loadable, skipped, guard=source.guard, refusal=source.refusal)


def _stale(recorded: dict, here: dict) -> str:
    """Why a record's fingerprint does not fit `here` ('field X there, Y here; ...'), or '' where it fits.

    A record compares on the fields both fingerprints hold: one an earlier slime-flashqla wrote
    holds the GPU architecture and its backend's distributions only, which was all it vouched for.
    """
    if not isinstance(recorded, dict) or "gpu_arch" not in recorded:
        return "the record holds no stack fingerprint"
    found = differences(recorded, here, shared_only=True)
    return "; ".join(f"{key} {there or 'none'} there, {ours or 'none'} here" for key, there, ours in found)


def start_kernel_preload(backend: str, key_heads: int, value_heads: int, *, cache_dir=None) -> Preloader | None:
    """Start preloading what `warmup` recorded for a GDN layer of these heads on `backend`; None when off.

    Once per process and (backend, heads): later calls return the first one's Preloader. Raises
    only for a bad SLIME_FLASHQLA_PRELOAD value, before any thread starts.
    """
    mode = preload_mode()
    if mode == OFF or not _could_preload(backend):
        return None  # no thread where nothing could be found (the torch and fla backends, a CPU machine)
    cache_dir = Path(cache_dir) if cache_dir is not None else tilelang_cache_dir()
    key = (backend, key_heads, value_heads, str(cache_dir))
    with _registry:
        preloader = _preloaders.get(key)
        if preloader is not None:
            return preloader
        import torch

        # The training thread's device, where CUDA is up already; asking would start CUDA here.
        device = torch.cuda.current_device() if torch.cuda.is_initialized() else None
        plan = lambda: _plan(backend, key_heads, value_heads, mode, device, cache_dir)  # noqa: E731
        preloader = _preloaders[key] = Preloader(f"{backend} {key_heads}/{value_heads}", plan)
    return preloader.start()


@atexit.register
def _stop_all() -> None:
    for preloader in list(_preloaders.values()):
        preloader.stop()  # a daemon thread: the process does not wait for it, it only stops early
