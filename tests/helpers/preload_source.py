"""A `SpecialisationSource` stand-in for the preload's tests: a backend's source whose items log what happens to them.

The tests hand it out for a backend named `testing` by patching the preload's source lookup
(`use_source`); the preload machinery around it runs for real. `changed_version` makes one
distribution's version here another, as an upgrade would, for the stack fingerprint.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

from slime_flashqla.kernels import fingerprint, preload


class Refused(RuntimeError):
    """What the test source's loads raise where a real one would compile (its `refusal`)."""


class Item:
    """One recorded spec as the test source loads it: every call is logged with its thread."""

    def __init__(self, spec: dict, source: Source) -> None:
        self.spec, self.source, self.label = spec, source, spec["name"]

    def problem(self):
        return "its cache entry is gone" if self.label in self.source.missing else None

    def prepare(self) -> bool:
        self.source.log("prepare", self.label)
        self.source.gate.wait(30)  # held until the test lets the preload go on
        return self.source.use_program

    def load(self) -> bool:
        self.source.log("load", self.label)
        if self.label in self.source.failing:
            raise RuntimeError(f"cannot load {self.label}\nsecond line")
        if self.label in self.source.refusing:
            raise Refused(f"{self.label} would compile")
        return True


class Source:
    """A backend's source of specialisations: a `SpecialisationSource`, as FlashQLA's TileLangPackage is."""

    refusal = Refused

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.missing, self.failing, self.refusing = set(), set(), set()
        self.loaded: list[str] = []  # what the "kernel package" has built in this process
        self.use_program = None
        self.guarded = []

    def log(self, phase: str, label: str) -> None:
        self.events.append((phase, label, threading.current_thread().name))

    def installed(self) -> bool:
        return True

    def snapshot(self) -> set:
        return set(self.loaded)

    def record(self, before, cache_dir, record_dir):
        return [{"name": name} for name in self.loaded if name not in before], []

    def specialisations(self, specs, cache_dir, record_dir, use_program):
        self.use_program = use_program
        return [Item(spec, self) for spec in specs]

    def guard_problem(self):
        return None

    @contextmanager
    def guard(self):
        self.guarded.append("enter")
        yield
        self.guarded.append("exit")

    def compile_ahead(self, steps, threads, lock):
        raise NotImplementedError("the preload never compiles ahead")


def use_source(monkeypatch, source: Source, name: str = "testing") -> Source:
    """The preload's source lookup hands out `source` for backend `name` (the real one for every other name)."""
    real = preload._source
    monkeypatch.setattr(preload, "_source", lambda backend: source if backend == name else real(backend))
    return source


def changed_version(monkeypatch, distribution: str, version: str) -> None:
    """Here, `distribution` is installed at `version` (the stack fingerprint reads it from package metadata)."""
    real = fingerprint.distribution_version
    monkeypatch.setattr(
        fingerprint, "distribution_version", lambda name: version if name == distribution else real(name)
    )
