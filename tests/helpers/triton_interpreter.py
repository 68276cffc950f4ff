"""Triton's CPU interpreter for machines without CUDA, set up before any test calls a Triton kernel.

TRITON_INTERPRET is read when @triton.jit decorates a kernel, and slime_flashqla.triton_ops
decorates its kernels on their first call, so setting it when the test session starts (the
root conftest calls `use_interpreter_without_gpu`) covers every test that reaches them: the
kernels' own tests and the layers and backends that call them.
"""

from __future__ import annotations

import importlib.util
import os

HAS_TRITON = importlib.util.find_spec("triton") is not None


def _cuda_available() -> bool:
    try:  # the image and conda sessions collect tests too; keep this import-safe without torch
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


ON_GPU = _cuda_available()


def _interpreter_problem() -> str | None:
    """Why Triton kernels cannot run in this machine's interpreter, or None."""
    if not HAS_TRITON:
        return "needs triton (pip install triton; see env/dev-tools.txt)"
    if importlib.util.find_spec("torch") is None:  # the conda check's tools bring triton, not torch
        return "needs torch"
    from importlib.metadata import version

    from packaging.version import Version

    # 3.6 is what the suite is checked on (env/dev-tools.txt).
    if Version(version("triton")) < Version("3.6"):
        return f"Triton's CPU interpreter is checked from triton 3.6 on; this is triton {version('triton')}"
    # Triton 3.4's and 3.6's interpreters turn one-element arrays into loop bounds with int(), which
    # numpy >= 2.4 refuses ("only 0-dimensional arrays can be converted to Python scalars"): the
    # H200 nodes' numpy 2.5.2 and the images' lock carry it.
    if importlib.util.find_spec("numpy") is None:
        return "Triton's CPU interpreter needs numpy (pip install -r env/dev-tools.txt)"
    if Version(version("numpy")) >= Version("2.4"):
        return (
            f"Triton's CPU interpreter fails on numpy >= 2.4, this is numpy {version('numpy')} "
            "(env/dev-tools.txt pins the numpy it runs with)"
        )
    return None


# Why Triton's CPU interpreter cannot run the kernels here (None: it can), GPU or not.
INTERPRETER_UNAVAILABLE = _interpreter_problem()
# Where no GPU runs the kernels compiled, why the interpreter cannot run them either (None: it can).
KERNELS_UNAVAILABLE = None if ON_GPU and HAS_TRITON else INTERPRETER_UNAVAILABLE


def _round_bf16_like_the_gpu() -> None:
    """Make the interpreter round float32 -> bfloat16 to nearest-even, as cvt.rn.bf16.f32 on the GPU does.

    Triton 3.6's interpreter truncates that cast (InterpreterBuilder.cast_impl), so every bf16
    store would carry up to a whole ulp of error that compiled kernels do not have; the
    parity tolerances below are those of a correctly rounded kernel.
    """
    import numpy as np
    import torch
    import triton.language as tl
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    if getattr(builder, "_slime_flashqla_rtne", False):
        return
    cast_impl = builder.cast_impl

    def cast_rtne(self, src, dst_type):
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
            rounded = torch.from_numpy(np.ascontiguousarray(src.data, dtype=np.float32)).to(torch.bfloat16)
            return interpreter.TensorHandle(rounded.view(torch.int16).numpy().view(np.uint16), tl.bfloat16)
        return cast_impl(self, src, dst_type)

    builder.cast_impl = cast_rtne
    builder.create_fp_trunc = lambda self, src, dst_type: self.cast_impl(src, dst_type)
    builder._slime_flashqla_rtne = True


def use_interpreter_without_gpu() -> None:
    """Where triton is installed and no CUDA device is, run Triton kernels in the interpreter."""
    if not ON_GPU and KERNELS_UNAVAILABLE is None:
        os.environ.setdefault("TRITON_INTERPRET", "1")
        _round_bf16_like_the_gpu()
