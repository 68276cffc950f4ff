"""Run the Triton kernels compiled where CUDA is available, else in Triton's CPU interpreter.

The interpreter is set up for the whole session by the root conftest
(tests/helpers/triton_interpreter.py). Without triton installed every test here skips with the reason.
"""

from __future__ import annotations

import os

import pytest

from helpers.triton_interpreter import KERNELS_UNAVAILABLE, ON_GPU

# The interpreter turns one-element arrays into loop bounds with a call NumPy deprecates.
INTERPRETER_NOISE = pytest.mark.filterwarnings("ignore:Conversion of an array with ndim > 0:DeprecationWarning")


def pytest_collection_modifyitems(config, items):
    here = os.path.dirname(__file__)
    skip = pytest.mark.skip(reason=KERNELS_UNAVAILABLE or "")
    for item in items:
        if not str(item.fspath).startswith(here):
            continue
        if KERNELS_UNAVAILABLE:
            item.add_marker(skip)
        elif not ON_GPU:
            item.add_marker(INTERPRETER_NOISE)
