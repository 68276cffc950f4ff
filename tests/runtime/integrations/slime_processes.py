"""Running slime's code in real subprocesses for these tests: the environment, a gloo pair, slime's own pytest files."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import slime_flashqla

RUNTIME = Path(slime_flashqla.__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
TESTS = HERE.parents[1]
# sitecustomize that installs the integration at the start of every process (and its children) of a run
INSTALLING_SITE = TESTS / "helpers" / "slime_site"
DEADLINE_S = 240


def require_slime_comm_dependencies() -> None:
    """Skip, naming the fix, where slime's reloadable_process_group cannot import (psutil is slime's dependency)."""
    if importlib.util.find_spec("psutil") is None:
        pytest.skip("slime's reloadable_process_group imports psutil, not installed here (env/dev-tools.txt has it)")


def slime_env(source: Path, *, install_at_start: bool = False, **extra: str) -> dict[str, str]:
    """The environment of a subprocess that imports this package and slime's source."""
    paths = [str(RUNTIME), str(source), str(TESTS)]
    if install_at_start:
        paths.insert(0, str(INSTALLING_SITE))
    inherited = os.environ.get("PYTHONPATH")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLIME_FLASHQLA_", "SLIME_SOURCE"))}
    env.update(PYTHONPATH=os.pathsep.join([*paths, *([inherited] if inherited else [])]), SLIME_SOURCE=str(source))
    env.update(extra)
    return env


def run_gloo_pair(mode: str, source: Path, free_bytes: int = 100 * 1024**3) -> list[dict]:
    """Both ranks' results of slime_comm_worker.py in `mode` (slime alone, or a comm policy under the integration)."""
    require_slime_comm_dependencies()
    with tempfile.TemporaryDirectory(prefix="slime_comm_") as tmp:
        store = str(Path(tmp) / "store")
        command = [sys.executable, str(HERE / "slime_comm_worker.py"), mode, "{rank}", "2", store, str(free_bytes)]
        procs = [
            subprocess.Popen(
                [part.format(rank=rank) for part in command],
                env=slime_env(source),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for rank in range(2)
        ]
        outputs = []
        try:
            for proc in procs:
                out, err = proc.communicate(timeout=DEADLINE_S)
                assert proc.returncode == 0, f"rank exited {proc.returncode}:\n{err[-4000:]}"
                outputs.append(json.loads(out.strip().splitlines()[-1]))
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
    return outputs
