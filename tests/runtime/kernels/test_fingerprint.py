"""The stack fingerprint: one, built from what each backend declares, and the archive, the preload and doctor read it.

The archive is exported and imported, the preload records and plans, and doctor's report is
collected for real, on this machine's fingerprint; only a version is changed (helpers/preload_source.py).
"""

from __future__ import annotations

import json

import pytest
import torch

from helpers.kernel_cache_files import make_caches
from helpers.preload_source import Source, changed_version, use_source
from slime_flashqla.cli.doctor import report_rows
from slime_flashqla.diagnostics.report import collect_report
from slime_flashqla.gdn.backends import KERNEL_BACKENDS
from slime_flashqla.host.packages import distribution_version
from slime_flashqla.kernel_cache.archive import export_archive, import_archive
from slime_flashqla.kernel_cache.manifest import read_manifest
from slime_flashqla.kernel_cache.stack import Stack, StackMismatch
from slime_flashqla.kernel_cache.warmup import WarmupTask
from slime_flashqla.kernels import preload
from slime_flashqla.kernels.fingerprint import (
    COMMON_DISTRIBUTIONS,
    FACTS,
    describe,
    fingerprint,
    fingerprint_fields,
)
from slime_flashqla.kernels.preload import record_dir, recording, start_kernel_preload
from slime_flashqla.workload.heads import HeadConfig

NO_GPU = not torch.cuda.is_available()


@pytest.fixture
def source(monkeypatch):
    """The `testing` backend's source of specialisations, a fresh preload registry, the preload on, a GPU 'here'."""
    monkeypatch.setattr(preload, "_gpu_present", lambda: True)
    monkeypatch.setattr(preload, "_preloaders", {})
    monkeypatch.delenv(preload.PRELOAD_ENV, raising=False)
    return use_source(monkeypatch, Source())


def archived(tmp_path) -> tuple[dict, dict]:
    """(the caches, the fingerprint an archive of them records): exported as `cache export` does."""
    tilelang, triton = make_caches(tmp_path / "source")
    caches = {"tilelang": tilelang, "triton": triton}
    export_archive(tmp_path / "kernels.tar", caches)
    return caches, Stack.from_dict(read_manifest(tmp_path / "kernels.tar")["stack"]).compared_fields()


def recorded(source: Source, cache) -> dict:
    """The fingerprint a layer part of `warmup` records beside what it built."""
    task = WarmupTask("testing", HeadConfig(2, 4))
    with recording(task, cache):
        source.loaded.append("a")
    return json.loads((record_dir(cache) / f"{task.key}.json").read_text())["stack"]


def test_the_fingerprint_names_each_declared_distribution_once(monkeypatch):
    fields = fingerprint_fields()
    declared = [name for backend in KERNEL_BACKENDS.values() for name in backend.kernel_distributions]
    assert len(fields) == len(set(fields))  # triton: FLA's and everyone's, named once
    assert set(fields) == {"gpu_arch", *COMMON_DISTRIBUTIONS, *declared, *FACTS}
    assert list(fingerprint()) == list(fields)
    # A backend's declaration is all it takes: a new distribution joins once, one already named stays once.
    monkeypatch.setattr(KERNEL_BACKENDS["torch"], "kernel_distributions", ("pytest", "tilelang"))
    widened = fingerprint_fields()
    assert widened.count("pytest") == 1 and widened.count("tilelang") == 1 and len(widened) == len(fields) + 1


def test_the_archive_the_preload_and_doctor_report_the_same_fingerprint(source, tmp_path, monkeypatch):
    # A distribution one backend declares (any installed one does) reaches all three.
    monkeypatch.setattr(KERNEL_BACKENDS["torch"], "kernel_distributions", ("pytest",))
    _, in_archive = archived(tmp_path)
    in_record = recorded(source, tmp_path / "cache")
    report = collect_report()
    assert in_archive == in_record == report["kernel_fingerprint"] and in_archive["pytest"] == distribution_version(
        "pytest"
    )
    # The manifest's JSON keeps its keys sorted; the record and doctor keep the fingerprint's order.
    assert list(in_record) == list(report["kernel_fingerprint"]) == list(fingerprint_fields())
    assert ("kernel fingerprint", describe(in_record)) in report_rows(report)
    if NO_GPU:
        assert in_archive["gpu_arch"] == "none" and describe(in_record).startswith("gpu_arch none, torch ")


# Each backend's first declared distribution, and a common one.
CHANGED = [backend.kernel_distributions[0] for backend in KERNEL_BACKENDS.values() if backend.kernel_distributions]


@pytest.mark.parametrize("distribution", [*CHANGED, "torch"])
def test_a_changed_version_is_refused_by_the_archive_import_and_the_preload_naming_the_field(
    distribution, source, tmp_path, monkeypatch
):
    caches, in_archive = archived(tmp_path)
    recorded(source, tmp_path / "cache")
    before = in_archive[distribution] or "none"
    changed_version(monkeypatch, distribution, "9.9.9")

    with pytest.raises(StackMismatch) as refused:
        import_archive(tmp_path / "kernels.tar", {cache: tmp_path / "to" / cache for cache in caches})
    message = str(refused.value)
    assert f": {distribution} {before} (archive) vs 9.9.9 (here). Nothing was imported" in message
    assert message.count(" (archive) vs ") == 1  # that field alone

    preloader = start_kernel_preload("testing", 2, 4, cache_dir=tmp_path / "cache")
    assert preloader.wait(30) and preloader.result.loaded == 0 and source.events == []
    assert preloader.result.note == (
        f"stopped: recorded on another stack ({distribution} {before} there, 9.9.9 here); "
        "run slime-flashqla warmup again"
    )
