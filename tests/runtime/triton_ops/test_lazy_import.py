"""Importing the package costs no triton import; the first call imports the kernels."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

RUNTIME = Path(__file__).resolve().parents[3] / "runtime"


def _run(code: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(RUNTIME), "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_import_does_not_import_triton_and_the_first_call_does():
    out = _run(
        "import sys, torch\n"
        "import slime_flashqla, slime_flashqla.triton_ops as ops\n"
        "print('triton' in sys.modules, end=' ')\n"
        "ops.l2norm_fwd(torch.randn(2, 8))\n"
        "print('triton' in sys.modules)\n"
    )
    assert out == "False True"
