"""CompileLog against real compiles on a GPU: a Triton kernel compiled, loaded from cache, autotuned.

Each case runs in a fresh process with its own Triton cache, so what is counted is what
Triton really did in that process: a compile the first time, a disk-cache load the next.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available() is False)"),
]

CHILD = textwrap.dedent(
    """
    import json, sys
    from slime_flashqla.kernels.compile_log import CompileLog
    log = CompileLog().install()
    import torch, triton, triton.language as tl

    @triton.jit
    def scale(x, y, n, factor, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        tl.store(y + offsets, tl.load(x + offsets, mask=mask) * factor, mask=mask)

    @triton.autotune(configs=[triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128})], key=["n"])
    @triton.jit
    def tuned(x, y, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        tl.store(y + offsets, tl.load(x + offsets, mask=mask) + 1, mask=mask)

    x = torch.randn(4096, device="cuda")
    y = torch.empty_like(x)
    scale[(32,)](x, y, 4096, 2.0, BLOCK=128)
    first = log.take()
    scale[(32,)](x, y, 4096, 3.0, BLOCK=128)  # same specialisation: nothing new
    again = log.take()
    grid = lambda meta: (triton.cdiv(4096, meta["BLOCK"]),)
    tuned[grid](x, y, 4096)
    autotuned = log.take()
    tuned[grid](x, y, 4096)
    torch.cuda.synchronize()
    cached = log.take()
    sys.stdout = sys.stdout.stream
    print("EVENTS " + json.dumps([[e.kind for e in events] for events in (first, again, autotuned, cached)]))
    """
)


def run_child(cache_dir):
    # Triton reads a kernel's source from its file: the child is a script, not `python -c`.
    script = cache_dir.parent / "triton_child.py"
    script.write_text(CHILD)
    env = {**os.environ, "TRITON_CACHE_DIR": str(cache_dir)}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith("EVENTS "))
    return json.loads(line.removeprefix("EVENTS "))


def test_a_real_triton_compile_autotune_and_cache_load_are_told_apart(tmp_path):
    first, again, autotuned, cached = run_child(tmp_path / "triton")
    assert first == ["triton-compile"] and again == []
    assert autotuned.count("triton-autotune") == 1 and autotuned.count("triton-compile") == 2  # two configs
    assert cached == []
    # A fresh process on the same cache: loads, no compile; the autotuner benchmarks again (no disk cache asked).
    first, again, autotuned, _ = run_child(tmp_path / "triton")
    assert first == ["triton-load"] and again == []
    assert autotuned.count("triton-autotune") == 1 and "triton-compile" not in autotuned


TILELANG_CHILD = textwrap.dedent(
    """
    import json, sys
    from slime_flashqla.kernels.compile_log import CompileLog
    log = CompileLog().install()
    import torch, tilelang, tilelang.language as T

    @tilelang.jit(out_idx=[-1])
    def add_one(N, block=128, dtype="float32"):
        @T.prim_func
        def add_one_kernel(A: T.Tensor((N,), dtype), B: T.Tensor((N,), dtype)):
            with T.Kernel(T.ceildiv(N, block), threads=block) as bx:
                for i in T.Parallel(block):
                    B[bx * block + i] = A[bx * block + i] + 1.0
        return add_one_kernel

    x = torch.randn(1024, device="cuda")
    assert torch.allclose(add_one(1024)(x), x + 1)
    first = log.take()
    assert torch.allclose(add_one(1024)(x), x + 1)
    again = log.take()
    print("EVENTS " + json.dumps([[[e.kind, e.name] for e in events] for events in (first, again)]))
    """
)


def test_a_real_tilelang_compile_is_counted_and_a_cache_load_is_not(tmp_path):
    pytest.importorskip("tilelang")
    env = {**os.environ, "TILELANG_CACHE_DIR": str(tmp_path / "tilelang")}

    script = tmp_path / "tilelang_child.py"  # TileLang, like Triton, reads the kernel's source file
    script.write_text(TILELANG_CHILD)

    def run():
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env)
        assert done.returncode == 0, done.stderr[-2000:]
        line = next(line for line in done.stdout.splitlines() if line.startswith("EVENTS "))
        return json.loads(line.removeprefix("EVENTS "))

    first, again = run()
    assert [kind for kind, _ in first] == ["tilelang-compile"] and again == []
    assert "add_one" in first[0][1]
    first, again = run()  # a fresh process on the same cache: TileLang loads it
    assert first == [] and again == []
