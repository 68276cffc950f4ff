"""Count kernel compiles and autotunes as the libraries themselves report them.

- TileLang logs `TileLang begins to compile kernel `name`` on its `tilelang` logger when it
  really compiles (with TILELANG_PRINT_ON_COMPILATION on, its default), never when it loads a
  kernel from its disk cache.
- Triton calls `triton.knobs.compilation.listener` after every `triton.compile`, with
  `cache_hit` telling a real compile from a load of Triton's disk cache.
- Triton's autotuner prints `Triton autotuning for function NAME,` when it benchmarked configs
  (with TRITON_PRINT_AUTOTUNING on), not when its in-memory or disk cache answered.
- TorchDynamo counts the frames it compiles in `torch._dynamo.utils.counters`.

`CompileLog.install()` hooks all of them in this process; `take()` returns what happened since
the previous `take()`, so a caller can attribute events to the step that caused them.
"""

from __future__ import annotations

import importlib.util
import io
import logging
import os
import re
import sys
import threading
from dataclasses import dataclass

TILELANG_COMPILE = re.compile(r"begins to compile kernel `([^`]+)`")
TRITON_AUTOTUNE = re.compile(r"Triton autotuning for function ([^\s,]+)")
KINDS = ("tilelang-compile", "triton-compile", "triton-autotune", "torch-compile", "triton-load")


@dataclass(frozen=True)
class CompileEvent:
    """One compile, autotune or cache load, and the kernel it was for."""

    kind: str  # one of KINDS
    name: str


class _TileLangHandler(logging.Handler):
    def __init__(self, log: CompileLog) -> None:
        super().__init__(logging.INFO)
        self.log = log

    def emit(self, record: logging.LogRecord) -> None:
        match = TILELANG_COMPILE.search(record.getMessage())
        if match:
            self.log.record("tilelang-compile", match.group(1))


class _AutotuneScanner(io.TextIOBase):
    """Passes writes through to the real stream and records the autotuner's 'finished' lines."""

    def __init__(self, stream, log: CompileLog) -> None:
        self.stream, self.log = stream, log

    def write(self, text: str) -> int:
        for match in TRITON_AUTOTUNE.finditer(text):
            self.log.record("triton-autotune", match.group(1))
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()

    def fileno(self) -> int:
        return self.stream.fileno()

    def isatty(self) -> bool:
        return self.stream.isatty()


class CompileLog:
    """Collects CompileEvents from TileLang's log, Triton's listener and autotuner, and TorchDynamo."""

    def __init__(self) -> None:
        self._events: list[CompileEvent] = []
        self._lock = threading.Lock()
        self._dynamo_frames = 0
        self.hooked: list[str] = []  # which libraries are hooked, for the report

    def record(self, kind: str, name: str) -> None:
        """Add one event (called by the hooks)."""
        with self._lock:
            self._events.append(CompileEvent(kind, name))

    def install(self) -> CompileLog:
        """Hook TileLang's logger, Triton's compile listener and autotune report; returns self."""
        # Both are read when the event happens, so setting them now also covers later imports.
        os.environ["TILELANG_PRINT_ON_COMPILATION"] = "1"
        os.environ["TRITON_PRINT_AUTOTUNING"] = "1"
        logger = logging.getLogger("tilelang")
        logger.addHandler(_TileLangHandler(self))
        logger.setLevel(logging.INFO)  # what TileLang sets on import; an earlier logger config may not have
        self.hooked.append("tilelang")
        if importlib.util.find_spec("triton") is not None:
            self._hook_triton()
        return self

    def _hook_triton(self) -> None:
        from triton import knobs

        previous = knobs.compilation.listener

        def listener(*, src, metadata, metadata_group, times, cache_hit) -> None:
            name = getattr(src, "name", None) or metadata.get("name", "?")
            self.record("triton-load" if cache_hit else "triton-compile", name)
            if previous is not None:
                previous(src=src, metadata=metadata, metadata_group=metadata_group, times=times, cache_hit=cache_hit)

        knobs.compilation.listener = listener
        if not isinstance(sys.stdout, _AutotuneScanner):
            sys.stdout = _AutotuneScanner(sys.stdout, self)
        self.hooked.append("triton")

    def _dynamo_events(self) -> list[CompileEvent]:
        utils = sys.modules.get("torch._dynamo.utils")  # only there once something used torch.compile
        if utils is None:
            return []
        frames = int(utils.counters["frames"]["ok"])
        new, self._dynamo_frames = frames - self._dynamo_frames, frames
        return [CompileEvent("torch-compile", "torch.compile frame")] * new

    def take(self) -> list[CompileEvent]:
        """The events since the last take(), oldest first."""
        with self._lock:
            events, self._events = self._events, []
        return events + self._dynamo_events()


def count(events: list[CompileEvent], *kinds: str) -> int:
    """How many of `events` are of one of `kinds`."""
    return sum(event.kind in kinds for event in events)
