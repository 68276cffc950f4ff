"""The `fla` backend's import path against the lowest FLA the runtime supports (env/versions.toml [floor]).

`nox -s tests` installs that FLA release into a folder of its own (SLIME_FLASHQLA_FLA_FLOOR_PATH);
a fresh interpreter imports it ahead of anything else, so what is checked is that release.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[5]
FLOOR = tomllib.loads((ROOT / "env" / "versions.toml").read_text())["floor"]
FLOOR_PATH = os.environ.get("SLIME_FLASHQLA_FLA_FLOOR_PATH")

PROBE = """
import inspect, json
import fla
from slime_flashqla.gdn.backends.fla.library import fla_forwards_to_flashqla, fla_own_chunk_gated_delta_rule
from slime_flashqla.gdn.backends.fla.library import fla_supports_gva
from fla.ops.gated_delta_rule import chunk_gated_delta_rule as public  # what bench's FLA variant calls
from slime_flashqla.gdn.backends import KERNEL_BACKENDS

kernel = fla_own_chunk_gated_delta_rule()
print(json.dumps({
    "fla": fla.__version__,
    "fla_file": fla.__file__,
    "kernel": f"{kernel.__module__}.{kernel.__qualname__}",
    "backend_kernel_is_it": KERNEL_BACKENDS["fla"].kernel() is kernel,
    "gva": fla_supports_gva(),
    "forwards_to_flashqla": fla_forwards_to_flashqla(),
    "public_unwraps_to_it": inspect.unwrap(public) is kernel,
}))
"""


@pytest.mark.skipif(FLOOR_PATH is None, reason="run through `nox -s tests`, which installs the FLA floor release")
def test_fla_backend_import_path_works_with_the_lowest_supported_fla():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (FLOOR_PATH, os.environ.get("PYTHONPATH"))))}
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["fla"] == FLOOR["flash-linear-attention"]
    assert seen["fla_file"].startswith(FLOOR_PATH)
    assert seen["kernel"] == "fla.ops.gated_delta_rule.chunk.chunk_gated_delta_rule"
    assert seen["backend_kernel_is_it"] is True
    assert seen["gva"] is True
    assert seen["forwards_to_flashqla"] is False
    # bench's FLA variant calls the public function: FLA < 0.6 has no dispatch behind it.
    assert seen["public_unwraps_to_it"] is True


@pytest.mark.parametrize("tilelang", [True, False])
@pytest.mark.parametrize(
    ("fla", "triton", "capability", "refused"),
    [
        ("0.5.0", "3.6.0", (9, 0), True),  # what the H200 run of 2026-12-01 saw fail in the backward
        ("0.5.1", "3.4.0", (9, 0), True),  # torch 2.8's Triton: the pinned stack
        ("0.5.0", "3.3.1", (9, 0), False),  # before the Triton regression FLA guards against
        ("0.5.0", "3.6.0", (8, 0), False),  # not Hopper
        ("0.5.0", "3.6.0", (10, 0), False),
        ("0.5.0", None, (9, 0), False),
    ],
)
def test_fla_05_training_on_hopper_is_refused_before_any_launch(fla, triton, capability, refused, tilelang):
    """FLA 0.5.x's TileLang kernel takes no grouped value heads: refused whether or not TileLang is there."""
    from slime_flashqla.gdn.backends.fla.library import hopper_backward_problem

    problem = hopper_backward_problem(fla, triton, capability, tilelang=tilelang)
    assert (problem is not None) == refused
    if refused:
        assert f"flash-linear-attention {fla}" in problem and "pip install 'flash-linear-attention>=0.6'" in problem


@pytest.mark.parametrize(
    ("triton", "capability", "tilelang", "refused"),
    [
        ("3.6.0", (9, 0), True, False),  # the H200 runs: FLA routed chunk_bwd_dqkwg to TileLang
        ("3.6.0", (9, 0), False, True),  # FLA 0.6.0's chunk_bwd_dqkwg raises (#640)
        ("3.4.0", (9, 0), False, True),  # torch 2.8's Triton
        ("3.7.0+git1234", (9, 0), False, True),
        ("3.7.1", (9, 0), False, False),  # fixed in Triton
        ("3.3.1", (9, 0), False, False),  # before the regression
        ("3.6.0", (10, 0), False, False),  # not Hopper
    ],
)
def test_fla_06_training_on_hopper_without_tilelang_is_refused(triton, capability, tilelang, refused):
    from slime_flashqla.gdn.backends.fla.library import hopper_backward_problem

    problem = hopper_backward_problem("0.6.0", triton, capability, tilelang=tilelang)
    assert (problem is not None) == refused
    if refused:
        assert "#640" in problem and "pip install tilelang" in problem and f"Triton {triton}" in problem
