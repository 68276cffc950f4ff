"""Compiling a part's TileLang kernels ahead, on several threads: FlashQLA's real factories and front end on a CPU.

Where tilelang and flash-qla are installed (the default image), FlashQLA's whole forward and
backward runs in a fresh process with the discovery in place and CPU tensors (stand-ins for the
GPU queries its Python makes); no kernel launches, so nothing needs a GPU or nvcc. The compile
itself (nvcc) is stood in for where it is timed; TileLang's own compile is a GPU test's.
"""

from __future__ import annotations

import textwrap

from .test_tilelang_specs import needs_tilelang, run_child

# FlashQLA's Python asks for a CUDA device context and availability around its ops.
CPU_OPS = textwrap.dedent(
    """
    import contextlib
    torch.cuda.device = lambda *a, **k: contextlib.nullcontext()
    torch.cuda.is_available = lambda: True
    torch.cuda.is_current_stream_capturing = lambda: False
    import torch.nn.functional as F
    from slime_flashqla.gdn.backends import KERNEL_BACKENDS
    from slime_flashqla.kernels import tilelang_specs as ts
    from slime_flashqla.kernels.tilelang_prefetch import compile_forms, discovering, form_lock_key
    KERNEL_BACKENDS["flashqla"].tilelang.importer()
    import flash_qla
    from tilelang.jit import JITImpl

    def step(lengths=(1000, 3096), hk=16, hv=32):
        T = sum(lengths)
        leaf = lambda *s, dtype=torch.bfloat16: torch.randn(*s, dtype=dtype).requires_grad_()
        q, k, v = leaf(1, T, hk, 128), leaf(1, T, hk, 128), leaf(1, T, hv, 128)
        g = F.logsigmoid(torch.randn(1, T, hv)).requires_grad_()
        beta = torch.rand(1, T, hv, dtype=torch.bfloat16).requires_grad_()
        cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
        o, _ = flash_qla.chunk_gated_delta_rule(q, k, v, g=g, beta=beta, cu_seqlens=cu)
        o.float().sum().backward()
        return o
    """
)


@needs_tilelang
def test_the_discovery_runs_flashqla_through_and_compiles_nothing(tmp_path):
    out = run_child(
        CPU_OPS
        + textwrap.dedent(
            """
        real = JITImpl.__call__
        with discovering("flash_qla", ts.factory_name) as forms:
            o = step()
        print("SHAPE", tuple(o.shape))
        names = sorted({name.rpartition(":")[2] for name, _, _ in forms})
        print("NAMES", ",".join(names))
        print("RESTORED", JITImpl.__call__ is real)
        print("BUILT", sum(len(impl._kernel_cache) for impl in forms.values()))
        print("KERNELS", sorted(p.name for p in cache.rglob("*") if p.parent.name == "kernels"))
        """
        ),
        tmp_path / "cache",
    )
    lines = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
    assert lines["SHAPE"] == "(1, 4096, 32, 128)"
    names = lines["NAMES"].split(",")
    for kernel in ("chunk_local_cumsum", "kkt_solve", "fused_chunk_gdr_fwd", "fused_chunk_gdr_bwd", "prepare_h"):
        assert f"tilelang_{kernel}" in names, names
    assert lines["RESTORED"] == "True" and lines["BUILT"] == "0" and lines["KERNELS"] == "[]"


@needs_tilelang
def test_forms_are_built_here_compiled_on_threads_and_found_by_the_factory(tmp_path):
    out = run_child(
        CPU_OPS
        + textwrap.dedent(
            """
        import threading, time
        with discovering("flash_qla", ts.factory_name) as forms:
            step()
        running, most, threads, locks = [0], [0], set(), []
        guard = threading.Lock()
        made = {}

        def fake_compile(impl, program):  # nvcc stands in: what is timed is the pool around it
            with guard:
                running[0] += 1
                most[0] = max(most[0], running[0])
                threads.add(threading.current_thread().name)
            time.sleep(0.3)
            with guard:
                running[0] -= 1
            made[id(program)] = object()
            return made[id(program)]

        @contextlib.contextmanager
        def lock(key):
            locks.append(key)
            yield 0.0

        result = compile_forms(forms, 3, lock, fake_compile)
        print("RESULT", result.forms, result.compiled, result.present, result.failed)
        print("MOST", most[0], all(name.startswith("slime-flashqla-compile") for name in threads))
        print("LOCKS", len(locks), len(set(locks)), all(key.startswith("form-") for key in locks))
        # What `warmup` records later: each form's built program, in the factory's own template cache.
        templates = [ts._template(impl, args, dict(kw))[1] for (name, args, kw), impl in forms.items()]
        print("TEMPLATES", all(template is not None for template in templates))
        # The real factory call of each form now returns the kernel built ahead, compiling nothing.
        kernels = [impl(*args, **dict(kw)) for (name, args, kw), impl in forms.items()]
        print("FOUND", all(k in made.values() for k in kernels))
        """
        ),
        tmp_path / "cache",
    )
    lines = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
    forms, compiled, present, failed = lines["RESULT"].split(" ", 3)
    assert int(forms) >= 8 and compiled == forms and present == "0" and failed == "[]"
    assert lines["MOST"] == "3 True"
    assert lines["LOCKS"] == f"{forms} {forms} True"
    assert lines["TEMPLATES"] == "True" and lines["FOUND"] == "True"


@needs_tilelang
def test_a_form_that_fails_to_compile_is_left_to_the_steps_and_the_others_are_filed(tmp_path):
    out = run_child(
        CPU_OPS
        + textwrap.dedent(
            """
        with discovering("flash_qla", ts.factory_name) as forms:
            step()

        def fake_compile(impl, program):
            if "kkt_solve" in ts.factory_name(impl):
                raise RuntimeError("nvcc failed")
            return object()

        result = compile_forms(forms, 2, lambda key: contextlib.nullcontext(), fake_compile)
        print("RESULT", result.forms - result.compiled, result.failed)
        kkt = [impl for (name, _, _), impl in forms.items() if "kkt_solve" in name]
        print("KKT", all(not impl._kernel_cache for impl in kkt))
        """
        ),
        tmp_path / "cache",
    )
    lines = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
    assert lines["RESULT"] == "1 ['tilelang_kkt_solve: RuntimeError: nvcc failed']"
    assert lines["KKT"] == "True"


def test_a_form_s_lock_key_is_the_same_in_every_process():
    import subprocess
    import sys

    code = (
        "import torch; from slime_flashqla.kernels.tilelang_prefetch import form_lock_key; "
        "print(form_lock_key('m:f', (32, 16, 128), (('qkva_dtype', torch.bfloat16), ('is_varlen', True))))"
    )
    keys = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout for _ in range(2)}
    (key,) = keys
    assert key.startswith("form-") and len(key.strip()) == 37
