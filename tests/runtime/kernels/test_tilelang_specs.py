"""TileLang specialisations: recorded arguments, the compile guard, and FlashQLA's real factories on a CPU.

The first tests need neither TileLang nor a GPU. The last ones run FlashQLA's own factories
through TileLang's real front end where both are installed (the default image), in fresh
processes with two stand-ins for the missing GPU: the SM count FlashQLA reads at import, and
TileLang's target (sm_90, FlashQLA's Hopper kernels). The slow one compiles one small kernel
with nvcc, records it as `warmup` does, and preloads it in another process.
"""

from __future__ import annotations

import importlib.util
import logging
import math
import os
import shutil
import subprocess
import sys
import textwrap
import threading

import pytest
import torch

from slime_flashqla.kernels.compile_log import CompileLog
from slime_flashqla.kernels.tilelang_specs import (
    KERNEL_LOGGER,
    CompileRefused,
    TileLangSpecialisation,
    UnrecordableValue,
    decode_value,
    encode_value,
    refusing_compiles,
)

COMPILE_LINE = "TileLang begins to compile kernel `tilelang_fused_chunk_gdr_fwd_kernel` with `out_idx=None`"


def test_recorded_arguments_come_back_equal_and_of_the_same_type():
    values = [64, 128**-0.5, True, False, "float32", None, torch.bfloat16, torch.int32, torch.float32]
    back = [decode_value(encode_value(value)) for value in values]
    assert back == values and [type(v) for v in back] == [type(v) for v in values]
    assert back[1] == 128**-0.5 and math.copysign(1, back[1]) == 1  # the scale, to the last bit
    with pytest.raises(UnrecordableValue):
        encode_value(object())
    with pytest.raises(ValueError, match="not a dtype"):
        decode_value({"torch.dtype": "cuda"})  # torch.cuda is a module, not a dtype


@pytest.fixture
def tilelang_logging():
    """TileLang's logger at INFO, as TileLang sets it when imported."""
    logger = logging.getLogger("tilelang")
    saved = logger.level
    logger.setLevel(logging.INFO)  # setLevel, not the attribute: it clears the loggers' level caches
    yield logging.getLogger(KERNEL_LOGGER)
    logger.setLevel(saved)


def test_the_guard_refuses_a_compile_in_its_own_thread_only(tilelang_logging):
    log = CompileLog().install()
    saved = sys.stdout
    outcome = {}
    other_thread_logged = threading.Event()
    guarded_ready = threading.Event()

    def guarded():
        with refusing_compiles():
            guarded_ready.set()
            other_thread_logged.wait(30)  # the training thread compiles while the guard is in place
            try:
                tilelang_logging.info(COMPILE_LINE)
                outcome["guarded"] = "logged"
            except CompileRefused as refused:
                outcome["guarded"] = str(refused)
            tilelang_logging.info("TileLang completes to compile kernel `x`")  # other lines pass

    thread = threading.Thread(target=guarded)
    thread.start()
    guarded_ready.wait(30)
    tilelang_logging.info(COMPILE_LINE)  # this thread: a compile goes ahead and is counted
    other_thread_logged.set()
    thread.join(30)
    tilelang_logging.info(COMPILE_LINE.replace("fwd", "bwd"))  # after the block: no guard left
    sys.stdout = saved
    assert outcome["guarded"] == "TileLang would compile tilelang_fused_chunk_gdr_fwd_kernel"
    assert [event.name for event in log.take() if event.kind == "tilelang-compile"] == [
        "tilelang_fused_chunk_gdr_fwd_kernel",
        "tilelang_fused_chunk_gdr_bwd_kernel",
    ]
    assert not any(type(h).__name__ == "_RefuseCompiles" for h in tilelang_logging.handlers)


def test_a_spec_whose_cache_entry_lost_a_file_is_not_loaded(tmp_path):
    entry = tmp_path / "cache" / "0.1.15" / "linux-x86_64" / "kernels" / "abc"
    entry.mkdir(parents=True)
    (entry / "params.json").write_text("{}")
    spec = {
        "factory": "flash_qla.ops.utils.cumsum:tilelang_chunk_local_cumsum",
        "cache_key": "abc",
        "cache_entry": "0.1.15/linux-x86_64/kernels/abc",
        "entry_files": ["executable.so", "params.json"],
    }
    item = TileLangSpecialisation(spec, tmp_path / "cache", tmp_path / "records")
    assert item.label == "tilelang_chunk_local_cumsum"
    # Said before the factory is even looked up: nothing here imports TileLang.
    assert item.problem() == "its cache entry abc lacks executable.so"


def _tilelang_here() -> bool:
    return all(importlib.util.find_spec(name) is not None for name in ("tilelang", "flash_qla"))


needs_tilelang = pytest.mark.skipif(not _tilelang_here(), reason="needs tilelang and flash-qla installed")

# FlashQLA reads the GPU's SM count when imported, and picks its kernels by TileLang's target.
GPU_STAND_INS = textwrap.dedent(
    """
    import os, sys, types
    import torch
    if not torch.cuda.is_available():  # on a GPU node the real properties (the stack fingerprint reads them)
        torch.cuda.get_device_properties = lambda *a, **k: types.SimpleNamespace(multi_processor_count=132)
    import tilelang.contrib.nvcc as nvcc
    nvcc.get_target_compute_version = lambda *a, **k: "9.0"
    # The flashqla backend refuses a machine without an SM90 GPU, and a preload starts only beside a GPU.
    import slime_flashqla.gdn.backends.flashqla.backend as backends, slime_flashqla.kernels.preload as preload
    backends.validate_flashqla_runtime = lambda *a, **k: None
    preload._gpu_present = lambda: True
    from pathlib import Path
    cache = Path(sys.argv[1])
    # group_reduce_vector as FlashQLA's backward calls it for 16/32 heads.
    ARGS, KWARGS = (32, 16, 128), {"qkva_dtype": torch.bfloat16, "accum_dtype": "float32"}
    NAME = "flash_qla.ops.utils.group_reduce:tilelang_group_reduce_vector"
    """
)


def run_child(code: str, cache) -> str:
    env = {
        **os.environ,
        "TILELANG_CACHE_DIR": str(cache),
        "TILELANG_DEFAULT_TARGET": '{"kind": "cuda", "arch": "sm_90"}',
        "SLIME_FLASHQLA_PRELOAD": "1",
    }
    done = subprocess.run(
        [sys.executable, "-c", GPU_STAND_INS + textwrap.dedent(code), str(cache)],
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done.stdout


@needs_tilelang
def test_a_recorded_program_is_what_the_factory_builds_and_the_guard_stops_a_real_compile(tmp_path):
    """A preload reads the recorded program for itself, and a load that would compile is refused."""
    out = run_child(
        """
        import threading
        from slime_flashqla.gdn.backends import KERNEL_BACKENDS
        from slime_flashqla.kernels import tilelang_specs as ts
        source = KERNEL_BACKENDS["flashqla"].tilelang
        source.importer()
        factories = ts.jit_factories("flash_qla")
        print("FACTORIES", len(factories), NAME in factories)
        impl = factories[NAME]
        built = impl.get_tir(*ARGS, **KWARGS)  # TileLang's front end runs FlashQLA's factory body
        assert ts.save_program(impl, ARGS, KWARGS, cache / "records" / "p.json.gz")
        impl.func.p1_cache.clear()  # as in a fresh process
        spec = {"factory": NAME, "source_sha256": ts.source_digest(impl), "cache_key": "k", "cache_entry": "k",
                "entry_files": [], "program": "p.json.gz", "args": [ts.encode_value(v) for v in ARGS],
                "kwargs": [[k, ts.encode_value(v)] for k, v in KWARGS.items()]}
        item = ts.TileLangSpecialisation(spec, cache, cache / "records")
        print("PROBLEM", item.problem())
        assert item.prepare()
        key, template = ts._template(impl, ARGS, KWARGS)
        print("PRIVATE", template is None, item._program.script(show_meta=True) == built.script(show_meta=True))
        print("GUARD_PROBLEM", ts.compile_guard_problem())
        outcome = []
        def load():
            try:
                with ts.refusing_compiles():
                    item.load()
                outcome.append("loaded")
            except ts.CompileRefused as refused:
                outcome.append(str(refused))
        thread = threading.Thread(target=load)
        thread.start(); thread.join()
        print("LOAD", outcome[0])
        print("ENTRIES", sorted(p.name for p in cache.rglob("*") if p.parent.name == "kernels"))
        """,
        tmp_path / "cache",
    )
    lines = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
    assert lines["FACTORIES"] == "10 True"  # flash-qla 0.1.3's Hopper kernels and its two helpers
    assert lines["PROBLEM"] == "None"
    # The program read back prints as the built one, and stays out of the factory's own cache.
    assert lines["PRIVATE"] == "True True"
    assert lines["GUARD_PROBLEM"] == "None"
    assert lines["LOAD"] == "TileLang would compile tilelang_group_reduce_vector_kernel"
    assert lines["ENTRIES"] == "[]"  # nothing was compiled or stored


@needs_tilelang
@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="compiling a TileLang kernel needs nvcc")
def test_a_kernel_recorded_by_warmup_is_preloaded_by_a_layer_process_without_a_compile(tmp_path):
    cache = tmp_path / "cache"
    warmed = run_child(
        """
        from slime_flashqla.gdn.backends import KERNEL_BACKENDS
        from slime_flashqla.kernels.preload import recording
        from slime_flashqla.kernels.tilelang_specs import jit_factories
        from slime_flashqla.kernel_cache.warmup import WarmupTask
        from slime_flashqla.workload.heads import HeadConfig
        with recording(WarmupTask("flashqla", HeadConfig(16, 32)), cache):
            KERNEL_BACKENDS["flashqla"].kernel()
            jit_factories("flash_qla")[NAME](*ARGS, **KWARGS)  # compiled with nvcc, stored in the cache
        print("RECORDS", sorted(p.name for p in (cache / "slime-flashqla-preload").glob("*.json")))
        """,
        cache,
    )
    assert "RECORDS ['flashqla-hk16-hv32-varlen-bfloat16-layer-t32768.json']" in warmed
    out = run_child(
        """
        import logging
        from slime_flashqla.kernels.compile_log import CompileLog
        log = CompileLog().install()
        from slime_flashqla.kernels.preload import start_kernel_preload
        preloader = start_kernel_preload("flashqla", 16, 32)
        assert preloader.wait(240)
        result = preloader.result
        print("RESULT", result.loaded, result.programs, result.skipped, result.note or "-")
        from slime_flashqla.kernels.tilelang_specs import jit_factories
        impl = jit_factories("flash_qla")[NAME]
        key, _ = impl.func.parse_args(*ARGS, **KWARGS)
        from slime_flashqla.kernels.tilelang_specs import _template
        print("PRIVATE", _template(impl, ARGS, KWARGS)[1] is None)  # no recorded program in the factory's cache
        print("SAME", impl(*ARGS, **KWARGS) is impl._kernel_cache[key])  # the training thread's call
        print("COMPILES", [event.name for event in log.take() if event.kind == "tilelang-compile"])
        """,
        cache,
    )
    lines = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
    assert lines["RESULT"] == "1 1 [] -"
    assert lines["PRIVATE"] == "True"
    assert lines["SAME"] == "True" and lines["COMPILES"] == "[]"


@needs_tilelang
def test_tilelang_compiles_a_program_read_back_from_json_wrongly(tmp_path):
    """Why a recorded program never reaches the factory's cache: TileLang cannot compile it.

    On an H200, a layer whose first step found preloaded programs in the factories' cache and
    missed the disk cache failed in FlashQLA's kkt_solve instead of compiling. The program read
    back from JSON prints as the built one but fails layout inference; the built one does not
    (it gets as far as the CUDA compiler). When this test fails, TileLang compiles such programs.
    """
    out = run_child(
        """
        from slime_flashqla.kernels import tilelang_specs as ts
        from slime_flashqla.gdn.backends.flashqla.deferred_compile import import_deferring_decorators
        import_deferring_decorators("flash_qla")
        impl = ts.resolve_factory("flash_qla.ops.gated_delta_rule.chunk.hopper.kkt_solve:tilelang_kkt_solve")
        args = (32, 16, 128, 64)
        kwargs = dict(qkva_dtype=torch.bfloat16, b_dtype=torch.bfloat16, seqlen_dtype=torch.int32,
                      accum_dtype="float32", is_varlen=True)
        built = impl.get_tir(*args, **kwargs)
        assert ts.save_program(impl, args, kwargs, cache / "p.json.gz")
        # The read-back program first: a kernel compiled from the built one would be found in memory.
        for name, program in (("READ", ts.load_program(cache / "p.json.gz")), ("BUILT", built)):
            try:
                ts.compile_program(impl, program)
                print(name, "compiled")
            except Exception as error:
                print(name, type(error).__name__, "Invalid layout" in str(error))
        """,
        tmp_path / "cache",
    )
    lines = dict(line.split(" ", 1) for line in out.splitlines() if line.startswith(("BUILT ", "READ ")))
    assert lines["READ"] == "ValueError True", out[-2000:]
    assert not lines["BUILT"].endswith("True"), out[-2000:]  # compiled, or stopped later (no nvcc here)
