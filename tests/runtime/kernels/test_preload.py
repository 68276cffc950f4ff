"""The kernel preload: its switch, the warm-up's records, and the background thread that loads them.

The preload machinery runs for real here (threads, record files, logging, this machine's stack
fingerprint). What it loads comes from a small `SpecialisationSource` the source lookup hands out
for a backend named `testing`, whose items log what happens to them (helpers/preload_source.py):
FlashQLA's own TileLang items are tested in test_tilelang_specs.py.
"""

from __future__ import annotations

import json
import logging
import threading
import time

import pytest

from helpers.preload_source import Source, changed_version, use_source
from slime_flashqla.gdn.backends import KERNEL_BACKENDS
from slime_flashqla.kernel_cache.warmup import WarmupTask
from slime_flashqla.kernels import preload
from slime_flashqla.kernels.fingerprint import fingerprint
from slime_flashqla.kernels.preload import (
    Preloader,
    PreloadSettingError,
    SpecialisationSource,
    kernel_source,
    preload_mode,
    record_dir,
    recorded_specs,
    recording,
    start_kernel_preload,
)
from slime_flashqla.workload.heads import HeadConfig


@pytest.fixture
def backend(monkeypatch):
    """A fresh test source for the backend name `testing`, a fresh preload registry, the switch unset."""
    source = use_source(monkeypatch, Source())
    monkeypatch.setattr(preload, "_gpu_present", lambda: True)  # the preload runs where a GPU is
    monkeypatch.setattr(preload, "_preloaders", {})
    monkeypatch.delenv(preload.PRELOAD_ENV, raising=False)
    return source


def warm(backend: Source, cache_dir, part: str, heads=None, names=()):
    """What one warm-up part records (heads 2/4 unless given): `names` get built inside the recording."""
    task = WarmupTask("testing", heads or HeadConfig(2, 4), part=part)
    with recording(task, cache_dir):
        backend.loaded += [name for name in names if name not in backend.loaded]
    return task


def test_the_switch_is_on_unless_told_otherwise():
    assert preload_mode({}) == preload_mode({"SLIME_FLASHQLA_PRELOAD": "1"}) == "on"
    assert preload_mode({"SLIME_FLASHQLA_PRELOAD": " On "}) == "on"
    assert preload_mode({"SLIME_FLASHQLA_PRELOAD": "0"}) == preload_mode({"SLIME_FLASHQLA_PRELOAD": "off"}) == "off"
    assert preload_mode({"SLIME_FLASHQLA_PRELOAD": "calls"}) == "calls"
    with pytest.raises(PreloadSettingError) as raised:
        preload_mode({"SLIME_FLASHQLA_PRELOAD": "yes please"})
    message = str(raised.value)
    assert "SLIME_FLASHQLA_PRELOAD='yes please'" in message and "\n" not in message


def test_recording_writes_what_each_part_built_and_a_layer_reads_its_own_parts(backend, tmp_path):
    cache = tmp_path / "cache"
    warm(backend, cache, "layer", names=["cumsum", "fwd-cp", "fwd-128"])
    backend.loaded.clear()  # each part is its own process
    warm(backend, cache, "no-cp", names=["cumsum", "fwd-128", "fwd-forced"])  # a forced path: not preloaded
    backend.loaded.clear()
    warm(backend, cache, "no-cp+states", names=["fwd-states"])  # what `check` runs, never a layer
    backend.loaded.clear()
    warm(backend, cache, "layer", heads=HeadConfig(1, 4), names=["other-heads"])
    backend.loaded = ["cumsum"]  # built by an earlier task in the same process: not this task's
    other_budget = WarmupTask("testing", HeadConfig(2, 4), max_tokens=8192)
    with recording(other_budget, cache):
        backend.loaded += ["bidi", "fwd-cp"]

    # Only the layer parts write a record: the forced paths and the state variants are no layer's.
    tasks = [WarmupTask("testing", HeadConfig(2, 4)), WarmupTask("testing", HeadConfig(1, 4)), other_budget]
    files = sorted(path.name for path in record_dir(cache).glob("*.json"))
    assert files == sorted(f"{task.key}.json" for task in tasks)
    record = json.loads((record_dir(cache) / f"{other_budget.key}.json").read_text())
    assert record["stack"] == fingerprint() and record["backend"] == "testing" and record["part"] == "layer"
    assert [spec["name"] for spec in record["specialisations"]] == ["bidi", "fwd-cp"]

    specs = recorded_specs(cache, "testing", 2, 4)
    # In both layer records first, then the rest in record order; no other heads.
    assert [spec["name"] for _, spec in specs] == ["fwd-cp", "cumsum", "fwd-128", "bidi"]
    assert all(stack == fingerprint() for stack, _ in specs)
    assert recorded_specs(cache, "testing", 1, 4)[0][1] == {"name": "other-heads"}
    assert recorded_specs(cache, "torch", 2, 4) == []


def test_a_failed_part_records_nothing_and_a_broken_record_file_is_passed_over(backend, tmp_path):
    cache = tmp_path / "cache"

    def failing_part():
        with recording(WarmupTask("testing", HeadConfig(2, 4)), cache):
            backend.loaded.append("half")
            raise RuntimeError("the warm-up step failed")

    with pytest.raises(RuntimeError):
        failing_part()
    assert not record_dir(cache).exists()
    warm(backend, cache, "layer", names=["whole"])
    (record_dir(cache) / "garbage.json").write_text("{not json")
    (record_dir(cache) / ".partial.json.123.tmp").write_text("{}")
    # "half" was built before this part began (same process): it is not this part's.
    assert [spec["name"] for _, spec in recorded_specs(cache, "testing", 2, 4)] == ["whole"]


def test_the_preload_runs_on_its_own_thread_without_blocking_the_caller(backend, tmp_path):
    cache = tmp_path / "cache"
    warm(backend, cache, "layer", names=["a", "b", "c"])
    backend.gate.clear()  # every prepare() waits until the test sets the gate
    began = time.perf_counter()
    preloader = start_kernel_preload("testing", 2, 4, cache_dir=cache)
    assert time.perf_counter() - began < 1.0
    assert not preloader.wait(0.2)  # still held at its first item, while the caller goes on
    backend.gate.set()
    assert preloader.wait(30)
    caller = threading.current_thread().name
    threads = {thread for _, _, thread in backend.events}
    assert threads == {"slime-flashqla preload testing 2/4"} and caller not in threads
    # Every recorded program is filed before any kernel is loaded, both in the recorded order.
    assert [(phase, label) for phase, label, _ in backend.events] == [
        ("prepare", "a"), ("prepare", "b"), ("prepare", "c"), ("load", "a"), ("load", "b"), ("load", "c"),
    ]  # fmt: skip
    assert backend.guarded == ["enter", "exit"]  # the loads ran inside the backend's compile guard
    result = preloader.result
    assert (result.loaded, result.present, result.programs, result.note) == (3, 0, 3, "")
    assert [label for label, _, _ in result.timings] == ["a", "b", "c"]


def test_the_preload_starts_once_per_process_and_heads(backend, tmp_path):
    cache = tmp_path / "cache"
    warm(backend, cache, "layer", names=["a"])
    warm(backend, cache, "layer", heads=HeadConfig(1, 4), names=["b"])
    first = start_kernel_preload("testing", 2, 4, cache_dir=cache)
    again = [start_kernel_preload("testing", 2, 4, cache_dir=cache) for _ in range(3)]
    other = start_kernel_preload("testing", 1, 4, cache_dir=cache)
    assert all(p is first for p in again) and other is not first
    assert first.wait(30) and other.wait(30)
    assert sorted(label for phase, label, _ in backend.events if phase == "load") == ["a", "b"]


def test_calls_mode_preloads_without_the_recorded_programs(backend, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    warm(backend, cache, "layer", names=["a"])
    monkeypatch.setenv(preload.PRELOAD_ENV, "calls")
    preloader = start_kernel_preload("testing", 2, 4, cache_dir=cache)
    assert preloader.wait(30)
    assert backend.use_program is False and preloader.result.programs == 0 and preloader.result.loaded == 1


def test_off_starts_nothing_and_a_bad_value_is_refused_before_any_thread(backend, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    warm(backend, cache, "layer", names=["a"])
    threads = threading.active_count()
    monkeypatch.setenv(preload.PRELOAD_ENV, "0")
    assert start_kernel_preload("testing", 2, 4, cache_dir=cache) is None
    monkeypatch.setenv(preload.PRELOAD_ENV, "maybe")
    with pytest.raises(PreloadSettingError):
        start_kernel_preload("testing", 2, 4, cache_dir=cache)
    assert threading.active_count() == threads and backend.events == [] and preload._preloaders == {}


def test_an_error_ends_the_preload_with_one_logged_line_and_never_reaches_the_caller(backend, tmp_path, caplog):
    cache = tmp_path / "cache"
    warm(backend, cache, "layer", names=["a", "b", "c"])
    backend.failing = {"b"}
    with caplog.at_level(logging.INFO, logger=preload.logger.name):
        preloader = start_kernel_preload("testing", 2, 4, cache_dir=cache)
        assert preloader.wait(30)
    result = preloader.result
    assert result.loaded == 1 and result.note == "stopped: cannot load b second line"
    assert [label for phase, label, _ in backend.events if phase == "load"] == ["a", "b"]  # c never tried
    lines = [record for record in caplog.records if record.name == preload.logger.name]
    assert len(lines) == 1 and lines[0].levelno == logging.WARNING
    assert "\n" not in lines[0].getMessage() and "stopped: cannot load b" in lines[0].getMessage()


def test_a_spec_that_would_compile_is_skipped_and_the_rest_still_loaded(backend, tmp_path, caplog):
    cache = tmp_path / "cache"
    warm(backend, cache, "layer", names=["a", "b", "c"])
    backend.refusing = {"b"}
    with caplog.at_level(logging.INFO, logger=preload.logger.name):
        preloader = start_kernel_preload("testing", 2, 4, cache_dir=cache)
        assert preloader.wait(30)
    result = preloader.result
    assert [label for phase, label, _ in backend.events if phase == "load"] == ["a", "b", "c"]
    assert (result.loaded, result.skipped, result.note) == (2, ["b: b would compile"], "")
    assert caplog.records[-1].levelno == logging.WARNING and "1 skipped (b: b would compile)" in caplog.messages[-1]


def test_what_is_no_longer_loadable_is_skipped_and_said(backend, tmp_path, caplog):
    cache = tmp_path / "cache"
    warm(backend, cache, "layer", names=["a", "gone", "c"])
    backend.missing = {"gone"}
    with caplog.at_level(logging.INFO, logger=preload.logger.name):
        preloader = start_kernel_preload("testing", 2, 4, cache_dir=cache)
        assert preloader.wait(30)
    assert [label for phase, label, _ in backend.events if phase == "load"] == ["a", "c"]
    assert preloader.result.skipped == ["gone: its cache entry is gone"]
    assert caplog.records[-1].levelno == logging.WARNING and "1 skipped (gone: its cache" in caplog.messages[-1]


def test_records_of_another_stack_are_not_loaded(backend, tmp_path, caplog, monkeypatch):
    cache = tmp_path / "cache"
    warm(backend, cache, "layer", names=["a"])
    recorded = fingerprint()["tilelang"] or "none"  # "none" where tilelang is not installed
    changed_version(monkeypatch, "tilelang", "9.9.9")  # a distribution the flashqla backend declares
    with caplog.at_level(logging.INFO, logger=preload.logger.name):
        preloader = start_kernel_preload("testing", 2, 4, cache_dir=cache)
        assert preloader.wait(30)
    assert backend.events == [] and preloader.result.loaded == 0
    assert preloader.result.note == (
        f"stopped: recorded on another stack (tilelang {recorded} there, 9.9.9 here); run slime-flashqla warmup again"
    )
    assert caplog.records[-1].levelno == logging.WARNING


def earlier_record(cache, stack: dict, names=("a",)) -> None:
    """A record as slime-flashqla 0.1.0 wrote it: its stack held the GPU and its backend's distributions only."""
    record_dir(cache).mkdir(parents=True, exist_ok=True)
    task = WarmupTask("testing", HeadConfig(2, 4))
    data = {"format": preload.FORMAT, "task": task.key, "backend": "testing", "key_heads": 2, "value_heads": 4,
            "dtype": "bfloat16", "varlen": True, "part": "layer", "stack": stack,
            "specialisations": [{"name": name} for name in names]}  # fmt: skip
    (record_dir(cache) / f"{task.key}.json").write_text(json.dumps(data))


def test_an_earlier_record_compares_on_the_fields_it_holds(backend, tmp_path):
    """A record with fewer fields than today's fingerprint is compared on those it has: what it vouched for."""
    here = fingerprint()
    old = {name: here[name] for name in ("gpu_arch", "flash-qla", "tilelang", "apache-tvm-ffi")}
    earlier_record(tmp_path / "fits", old)
    preloader = start_kernel_preload("testing", 2, 4, cache_dir=tmp_path / "fits")
    assert preloader.wait(30) and preloader.result.loaded == 1 and preloader.result.note == ""

    earlier_record(tmp_path / "stale", {**old, "flash-qla": "0.0.1"})
    preload._preloaders.clear()
    preloader = start_kernel_preload("testing", 2, 4, cache_dir=tmp_path / "stale")
    assert preloader.wait(30) and preloader.result.loaded == 0
    shown = here["flash-qla"] or "none"  # not installed here
    assert preloader.result.note == (
        f"stopped: recorded on another stack (flash-qla 0.0.1 there, {shown} here); run slime-flashqla warmup again"
    )

    earlier_record(tmp_path / "bare", {})  # never written by any slime-flashqla: not loaded, and said
    preload._preloaders.clear()
    preloader = start_kernel_preload("testing", 2, 4, cache_dir=tmp_path / "bare")
    assert preloader.wait(30) and preloader.result.loaded == 0
    assert "the record holds no stack fingerprint" in preloader.result.note


def test_sources_are_specialisation_sources_and_a_backend_without_one_has_none():
    assert isinstance(Source(), SpecialisationSource)
    assert isinstance(kernel_source("flashqla"), SpecialisationSource)
    assert kernel_source("fla") is None and kernel_source("torch") is None and kernel_source("no-such") is None
    assert KERNEL_BACKENDS["flashqla"].tilelang.package == "flash_qla"


def test_nothing_recorded_is_a_quiet_note(backend, tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger=preload.logger.name):
        preloader = start_kernel_preload("testing", 2, 4, cache_dir=tmp_path / "empty")
        assert preloader.wait(30)
    assert "none recorded in" in preloader.result.note and "slime-flashqla warmup" in preloader.result.note
    assert caplog.records[-1].levelno == logging.INFO


def test_a_stopped_preload_loads_nothing_more(backend, tmp_path):
    cache = tmp_path / "cache"
    warm(backend, cache, "layer", names=["a", "b"])
    backend.gate.clear()
    preloader = start_kernel_preload("testing", 2, 4, cache_dir=cache)
    while not backend.events:
        time.sleep(0.01)
    preloader.stop()  # what the process's exit does
    backend.gate.set()
    assert preloader.wait(30)
    assert [phase for phase, _, _ in backend.events] == ["prepare"] and preloader.result.loaded == 0


def test_a_layer_starts_its_backends_preload_at_construction(monkeypatch):
    from slime_flashqla.layers import Qwen3NextGatedDeltaNet, gated_deltanet
    from slime_flashqla.workload.models import gdn_layer_config

    calls = []
    monkeypatch.setattr(gated_deltanet, "start_kernel_preload", lambda *args: calls.append(args))
    Qwen3NextGatedDeltaNet(gdn_layer_config(2, 4), backend="torch")
    Qwen3NextGatedDeltaNet(gdn_layer_config(1, 4), backend="torch", preload_kernels=False)
    assert calls == [("torch", 2, 4)]


def test_no_thread_where_nothing_could_be_preloaded(monkeypatch):
    """The torch and fla backends keep no records, and without a GPU nothing was compiled: no thread at all."""
    from slime_flashqla.layers import Qwen3NextGatedDeltaNet
    from slime_flashqla.workload.models import gdn_layer_config

    monkeypatch.setattr(preload, "_preloaders", {})
    monkeypatch.delenv(preload.PRELOAD_ENV, raising=False)
    threads = threading.active_count()
    for backend in ("torch", "fla", "auto"):
        monkeypatch.setattr(preload, "_gpu_present", lambda gpu=backend != "auto": gpu)  # auto: on a CPU machine
        assert start_kernel_preload(backend, 2, 4) is None
    Qwen3NextGatedDeltaNet(gdn_layer_config(2, 4), backend="torch")
    assert preload._preloaders == {} and threading.active_count() == threads
    monkeypatch.setenv(preload.PRELOAD_ENV, "sometimes")
    with pytest.raises(PreloadSettingError):  # a bad setting stops the model build, in one line
        Qwen3NextGatedDeltaNet(gdn_layer_config(1, 2), backend="torch")


def test_a_forked_child_starts_with_fresh_preload_state(backend):
    """A child forked while a parent's preload holds its locks must not inherit them held (it has no thread)."""
    import multiprocessing

    preload._registry.acquire()
    try:
        ctx = multiprocessing.get_context("fork")
        child = ctx.Process(target=lambda: start_kernel_preload("testing", 1, 1, cache_dir="/nonexistent"))
        child.start()
        child.join(30)
        assert child.exitcode == 0
    finally:
        preload._registry.release()


def test_preloader_reports_an_exception_of_its_plan():
    def plan():
        raise OSError("the record directory is unreadable")

    preloader = Preloader("x", plan).start()
    assert preloader.wait(30)
    assert preloader.result.note == "stopped: the record directory is unreadable"


def test_the_setting_is_described_for_doctor_and_a_bad_one_says_how_to_fix_it():
    """doctor's line for SLIME_FLASHQLA_PRELOAD states the setting; a bad value says how to fix it (issue 34 ND24)."""
    from slime_flashqla.kernels.preload import preload_setting

    assert preload_setting({}) == "on (SLIME_FLASHQLA_PRELOAD unset)"
    assert preload_setting({"SLIME_FLASHQLA_PRELOAD": "0"}) == "off (SLIME_FLASHQLA_PRELOAD='0')"
    assert preload_setting({"SLIME_FLASHQLA_PRELOAD": "calls"}) == "calls (SLIME_FLASHQLA_PRELOAD='calls')"
    bad = preload_setting({"SLIME_FLASHQLA_PRELOAD": "maybe"})
    assert bad.startswith("INVALID: SLIME_FLASHQLA_PRELOAD='maybe': use 1") and "\n" not in bad
