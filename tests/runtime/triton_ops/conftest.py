"""Run the Triton kernels compiled where CUDA is available, else in Triton's CPU interpreter.

TRITON_INTERPRET is read when @triton.jit decorates a kernel, and slime_flashqla.triton_ops
decorates its kernels on the first call, so setting it here (before any test calls one)
is enough. Without triton installed every test here skips with the reason.
"""

from __future__ import annotations

import importlib.util
import os

import pytest
import torch

HAS_TRITON = importlib.util.find_spec("triton") is not None
ON_GPU = torch.cuda.is_available()

if HAS_TRITON and not ON_GPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")


def _round_bf16_like_the_gpu() -> None:
    """Make the interpreter round float32 -> bfloat16 to nearest-even, as cvt.rn.bf16.f32 on the GPU does.

    Triton 3.6's interpreter truncates that cast (InterpreterBuilder.cast_impl), so every bf16
    store would carry up to a whole ulp of error that compiled kernels do not have; the
    parity tolerances below are those of a correctly rounded kernel.
    """
    import numpy as np
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


if HAS_TRITON and not ON_GPU:
    _round_bf16_like_the_gpu()


# The interpreter turns one-element arrays into loop bounds with a call NumPy deprecates.
INTERPRETER_NOISE = pytest.mark.filterwarnings("ignore:Conversion of an array with ndim > 0:DeprecationWarning")


def pytest_collection_modifyitems(config, items):
    here = os.path.dirname(__file__)
    skip = pytest.mark.skip(reason="needs triton (pip install triton; see env/dev-tools.txt)")
    for item in items:
        if not str(item.fspath).startswith(here):
            continue
        if not HAS_TRITON:
            item.add_marker(skip)
        elif not ON_GPU:
            item.add_marker(INTERPRETER_NOISE)
