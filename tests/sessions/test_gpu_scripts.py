"""tests/gpu/validate_node.sh where it cannot do its job: one line and exit 2 before any stage runs."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "gpu" / "validate_node.sh"


def validate(tmp_path: Path, *stages: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": sys.executable, "OUT_DIR": str(tmp_path / "evidence")}
    return subprocess.run(["bash", str(SCRIPT), *stages], capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible")
def test_a_node_without_a_gpu_is_refused_before_any_stage(tmp_path):
    start = time.monotonic()
    done = validate(tmp_path)
    assert done.returncode == 2
    assert done.stdout == "" and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "no CUDA GPU is visible" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "evidence").exists()  # nothing was started, so no evidence folder either
    assert time.monotonic() - start < 30


def test_an_unknown_stage_is_refused_before_the_others_run(tmp_path):
    done = validate(tmp_path, "doctor", "nope")
    assert done.returncode == 2
    assert done.stdout == "" and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "unknown stage 'nope'" in done.stderr
    assert not (tmp_path / "evidence").exists()
