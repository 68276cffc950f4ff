"""TileLang's decorator rewrite deferred while a kernel package imports: which functions wait, and what they build.

The first tests need no TileLang. The last run TileLang's real decorators and FlashQLA's real
factories where both are installed (the default image), in fresh processes with the two GPU
stand-ins of tests/runtime/kernels/test_tilelang_specs.py: FlashQLA's programs built after a
deferred import print exactly as after a plain one.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
import threading

import pytest

from slime_flashqla.gdn.backends.flashqla.deferred_dsl import DeferredRewrite, annotates_own_arguments


def lazy_style(block_m: int, dtype: str = "float32"):
    def kernel(a, b):
        return a

    return kernel


def eager_style(a, b, n: int):
    a: list  # TileLang reads an annotation of an argument in the body as its type
    return n


def nested_eager(n: int):
    def inner(x, y):
        y: int
        return x

    return inner


def annotates_a_local(n: int):
    total: int = 0  # a local with a value: no argument hint
    count: int  # noqa: F842 - a local without one, not an argument
    return total


def test_only_functions_annotating_their_own_arguments_in_a_body_are_rewritten_at_once():
    assert not annotates_own_arguments(lazy_style)
    assert not annotates_own_arguments(annotates_a_local)
    assert annotates_own_arguments(eager_style)
    assert annotates_own_arguments(nested_eager)
    assert annotates_own_arguments(eval("lambda n: n"))  # no source to read: never deferred


def test_a_deferred_rewrite_runs_once_on_first_read_from_any_number_of_threads():
    calls = []
    gate = threading.Barrier(8)

    class Generator:
        source = "rewritten"

        def gen(self, builder):
            return builder

    def rewrite(func):
        calls.append(func)
        return Generator()

    deferred = DeferredRewrite(rewrite, lazy_style)
    assert deferred.extra_type_hints == {} and calls == []
    seen = []

    def read():
        gate.wait()
        seen.append(deferred.source)

    threads = [threading.Thread(target=read) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert seen == ["rewritten"] * 8 and calls == [lazy_style]
    assert deferred.gen("b") == "b" and len(calls) == 1
    with pytest.raises(AttributeError):
        deferred._missing  # noqa: B018 - private names never trigger the rewrite
    assert len(calls) == 1


def _installed(*names: str) -> bool:
    return all(importlib.util.find_spec(name) is not None for name in names)


ECHO = textwrap.dedent(
    """
    import tilelang
    import tilelang.language as T

    @tilelang.jit
    def lazy(n: int):
        @T.prim_func
        def kernel(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
            with T.Kernel(1, threads=128) as bx:
                for i in T.Parallel(n):
                    B[i] = A[i] * 2

        return kernel

    @tilelang.jit
    def eager(A, B, n: int):
        A: T.Tensor((n,), "float32")
        B: T.Tensor((n,), "float32")
        with T.Kernel(1, threads=128) as bx:
            for i in T.Parallel(n):
                B[i] = A[i] * 2
    """
)

CHILD = textwrap.dedent(
    """
    import hashlib, sys, threading
    sys.path.insert(0, sys.argv[1])
    from slime_flashqla.gdn.backends.flashqla.deferred_dsl import DeferredRewrite, tilelang_rewrite_deferred
    from tilelang.language.eager import builder
    real = builder.mutate
    elsewhere = {}

    def other_thread():  # another thread's decorators are not deferred while this one imports
        import other_kernels
        elsewhere["deferred"] = isinstance(other_kernels.lazy.func.ir_gen, DeferredRewrite)

    with tilelang_rewrite_deferred():
        worker = threading.Thread(target=other_thread)
        worker.start()
        worker.join()
        import echo_kernels as module
    assert builder.mutate is real, "mutate is restored after the block"
    print("DEFERRED", isinstance(module.lazy.func.ir_gen, DeferredRewrite),
          isinstance(module.eager.func.ir_gen, DeferredRewrite), elsewhere["deferred"])
    print("TENSOR_ARGS", sorted(module.eager.func.tensor_args))
    print("LAZY", hashlib.sha256(module.lazy.get_tir(256).script().encode()).hexdigest())
    print("EAGER", hashlib.sha256(module.eager.get_tir(n=256).script().encode()).hexdigest())
    print("BUILT", module.lazy.func.ir_gen._built is None)
    """
)


@pytest.mark.skipif(not _installed("tilelang"), reason="needs tilelang installed")
def test_tilelang_decorators_defer_only_where_the_program_never_needs_the_rewrite(tmp_path):
    """A lazy-style factory keeps its rewrite unbuilt; an eager one is rewritten at once; programs match."""
    (tmp_path / "echo_kernels.py").write_text(ECHO)
    (tmp_path / "other_kernels.py").write_text(ECHO)
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path)], capture_output=True, text=True, timeout=280, cwd=tmp_path
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)
    assert lines["DEFERRED"] == "True False False"
    assert lines["TENSOR_ARGS"] == "['A', 'B']"
    assert lines["BUILT"] == "True"  # the lazy program was built from the function, not the rewrite
    plain = subprocess.run(
        [sys.executable, "-c", "import sys, hashlib; sys.path.insert(0, '.'); import echo_kernels as m; "
         "print(hashlib.sha256(m.lazy.get_tir(256).script().encode()).hexdigest(), "
         "hashlib.sha256(m.eager.get_tir(n=256).script().encode()).hexdigest())"],
        capture_output=True, text=True, timeout=280, cwd=tmp_path,
    )  # fmt: skip
    assert plain.returncode == 0, plain.stderr[-3000:]
    assert plain.stdout.split() == [lines["LAZY"], lines["EAGER"]]


FLASHQLA_CHILD = textwrap.dedent(
    """
    import hashlib, sys, time, types
    import torch
    if not torch.cuda.is_available():
        torch.cuda.get_device_properties = lambda *a, **k: types.SimpleNamespace(multi_processor_count=132)
    import tilelang.contrib.nvcc as nvcc
    nvcc.get_target_compute_version = lambda *a, **k: "9.0"
    from slime_flashqla.gdn.backends.flashqla.deferred_dsl import DeferredRewrite
    from slime_flashqla.kernels import tilelang_specs as ts
    deferred = sys.argv[1] == "deferred"
    began = time.perf_counter()
    if deferred:
        from slime_flashqla.gdn.backends.flashqla.deferred_compile import import_deferring_decorators
        import_deferring_decorators("flash_qla")
    else:
        import flash_qla
    print("IMPORT_S", round(time.perf_counter() - began, 3))
    factories = ts.jit_factories("flash_qla")
    print("WAITING", sum(isinstance(impl.func.ir_gen, DeferredRewrite) for impl in factories.values()), len(factories))
    impl = ts.resolve_factory("flash_qla.ops.gated_delta_rule.chunk.hopper.kkt_solve:tilelang_kkt_solve")
    program = impl.get_tir(32, 16, 128, 64, qkva_dtype=torch.bfloat16, b_dtype=torch.bfloat16,
                           seqlen_dtype=torch.int32, accum_dtype="float32", is_varlen=True)
    print("KKT", hashlib.sha256(program.script(show_meta=True).encode()).hexdigest())
    impl = ts.resolve_factory("flash_qla.ops.utils.group_reduce:tilelang_group_reduce_vector")
    program = impl.get_tir(32, 16, 128, qkva_dtype=torch.bfloat16, accum_dtype="float32")
    print("REDUCE", hashlib.sha256(program.script(show_meta=True).encode()).hexdigest())
    """
)


@pytest.mark.skipif(not _installed("tilelang", "flash_qla"), reason="needs tilelang and flash-qla installed")
def test_flashqla_imports_with_every_factory_waiting_and_builds_the_same_programs():
    """flash-qla's ten factories are all lazy style: none is rewritten at import, and what they build is unchanged."""
    env = {"TILELANG_DEFAULT_TARGET": '{"kind": "cuda", "arch": "sm_90"}'}
    out = {}
    for how in ("plain", "deferred"):
        done = subprocess.run(
            [sys.executable, "-c", FLASHQLA_CHILD, how],
            capture_output=True, text=True, timeout=280, env={**__import__("os").environ, **env},
        )  # fmt: skip
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
        out[how] = dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)
    factories = out["plain"]["WAITING"].split()[1]
    assert out["plain"]["WAITING"] == f"0 {factories}" and out["deferred"]["WAITING"] == f"{factories} {factories}"
    assert int(factories) >= 10
    assert out["deferred"]["KKT"] == out["plain"]["KKT"] and out["deferred"]["REDUCE"] == out["plain"]["REDUCE"]
