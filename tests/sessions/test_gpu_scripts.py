"""The GPU node scripts of the README's command table (tools/gpu/*.sh) and the GPU check scripts beside them.

Where a script cannot do its job (no GPU, a missing module, an unknown stage) it says why in one line
and exits 2 before any stage runs, writing nothing; by default it writes its evidence outside the
checkout; Ctrl-C or SIGTERM ends the whole script, the stage that runs and every later one.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = {name: ROOT / "tools" / "gpu" / f"{name}.sh" for name in ("validate_node", "stream_targets")}
no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible")


def shadow(folder: Path, **modules: str) -> Path:
    """A folder of stand-in modules (name -> source): first on PYTHONPATH, they hide the installed ones."""
    folder.mkdir(exist_ok=True)
    for name, source in modules.items():
        (folder / f"{name}.py").write_text(source)
    return folder


HIDDEN = "raise ImportError('hidden by the test')\n"
# torch that reports a GPU: the scripts' GPU probe passes, so what they check next can be seen on a CPU machine.
GPU_TORCH = "class cuda:\n    is_available = staticmethod(lambda: True)\n"


def script_env(tmp_path: Path, shadows: Path | None = None, **extra: str) -> dict[str, str]:
    """The environment the scripts run in: this interpreter, this checkout's runtime, a TMPDIR of the test's own."""
    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    path = [str(shadows)] if shadows else []
    env = {k: v for k, v in os.environ.items() if k not in ("OUT_DIR", "DRY", "STEPS")}
    env.update(
        PYTHON=sys.executable,
        PYTHONPATH=os.pathsep.join([*path, str(ROOT / "runtime"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        TMPDIR=str(tmp),
        **extra,
    )
    return env


def run(name: str, env: dict[str, str], *stages: str) -> subprocess.CompletedProcess:
    """The script in a session of its own, every process of which is ended if it outlives the timeout."""
    script = subprocess.Popen(
        ["bash", str(SCRIPTS[name]), *stages], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        start_new_session=True,
    )  # fmt: skip
    try:
        out, err = script.communicate(timeout=120)
    finally:
        end_session(script.pid)
    return subprocess.CompletedProcess(script.args, script.returncode, out, err)


def assert_refused(done: subprocess.CompletedProcess, *words: str) -> None:
    """One line on stderr, nothing on stdout, exit 2, and each of `words` in that line."""
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stdout == "" and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "Traceback" not in done.stderr
    for word in words:
        assert word in done.stderr


def checkout_entries() -> set[str]:
    return {p.name for p in ROOT.iterdir()}


@no_gpu
@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_a_machine_without_a_gpu_is_refused_before_any_stage(name, tmp_path):
    before = checkout_entries()
    start = time.monotonic()
    done = run(name, script_env(tmp_path, OUT_DIR=str(tmp_path / "evidence")))
    assert_refused(done, "no CUDA GPU is visible")
    assert not (tmp_path / "evidence").exists()  # nothing was started, so no evidence folder either
    assert checkout_entries() == before
    assert time.monotonic() - start < 30


@no_gpu
@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_without_out_dir_a_refused_script_writes_nowhere(name, tmp_path):
    before = checkout_entries()
    done = run(name, script_env(tmp_path))
    assert_refused(done)
    assert checkout_entries() == before
    assert list((tmp_path / "tmp").iterdir()) == []


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_an_unknown_stage_is_refused_before_the_others_run(name, tmp_path):
    done = run(name, script_env(tmp_path, OUT_DIR=str(tmp_path / "evidence")), "tests", "nope")
    assert_refused(done, "unknown stage 'nope'")
    assert not (tmp_path / "evidence").exists()


@pytest.mark.parametrize(
    ("name", "stage", "module"),
    [
        ("validate_node", "bench", "matplotlib"),
        ("validate_node", "tests", "pytest"),
        ("stream_targets", "stream-auto", "matplotlib"),
        ("stream_targets", "tests", "pytest"),
    ],
)
def test_a_missing_module_a_stage_needs_is_named_with_its_install_command(name, stage, module, tmp_path):
    shadows = shadow(tmp_path / "shadow", torch=GPU_TORCH, **{module: HIDDEN})
    first = "doctor" if name == "validate_node" else "warmup"
    done = run(name, script_env(tmp_path, shadows, OUT_DIR=str(tmp_path / "evidence")), first, stage)
    assert_refused(done, module, "pip install")
    assert not (tmp_path / "evidence").exists()


def test_the_first_module_check_runs_only_for_the_stages_that_need_it(tmp_path):
    """A stage list without a plot or a test stage does not ask for matplotlib or pytest."""
    shadows = shadow(tmp_path / "shadow", matplotlib=HIDDEN, pytest=HIDDEN)
    env = script_env(tmp_path, shadows, OUT_DIR=str(tmp_path / "evidence"), DRY="1")
    done = run("stream_targets", env, "warmup")
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
    assert (tmp_path / "evidence" / "warmup.json").is_file()


def session_processes(sid: int) -> list[int]:
    """The processes still alive in session `sid` (what a stopped script would have left behind)."""
    alive = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            alive.append(int(stat.parent.name))
    return alive


def end_session(sid: int) -> None:
    """SIGKILL to what is left of session `sid` (nothing, where the script behaved)."""
    for pid in session_processes(sid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="the stream stages plot: needs matplotlib")
@pytest.mark.parametrize(("sig", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_to_the_script_ends_the_stage_and_every_later_one(sig, status, tmp_path):
    """SIGINT as Ctrl-C sends it (to the script's process group), SIGTERM to its PID alone, as `kill` does."""
    env = script_env(tmp_path, OUT_DIR=str(tmp_path / "evidence"), DRY="1", STEPS="10000")
    log = tmp_path / "out.log"
    with log.open("w") as out:
        script = subprocess.Popen(
            ["bash", str(SCRIPTS["stream_targets"]), "stream-auto", "stream-kernel"],
            stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + 120
        while "step" not in log.read_text().split("==== stream", 1)[-1] and time.monotonic() < deadline:
            assert script.poll() is None, log.read_text()
            time.sleep(0.5)
        time.sleep(2)  # well inside the stream's 10000 steps
        (os.killpg if sig == signal.SIGINT else os.kill)(script.pid, sig)
        try:
            returncode = script.wait(timeout=60)
        finally:
            script.kill()
            time.sleep(0.5)
    text = log.read_text()
    assert returncode == status, text[-3000:]
    assert text.count("==== stream") == 1, text[-3000:]  # stream-kernel never started
    deadline = time.monotonic() + 10
    while session_processes(script.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert session_processes(script.pid) == []


@no_gpu
@pytest.mark.parametrize("name", ["slime_integration_check.py", "flashqla_sm121_probe.py"])
def test_the_gpu_check_scripts_refuse_a_machine_without_a_gpu(name, tmp_path):
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gpu" / name)],
        capture_output=True, text=True, timeout=120, env=script_env(tmp_path), cwd=tmp_path,
    )  # fmt: skip
    assert_refused(done, "needs a CUDA GPU")


@pytest.mark.skipif(
    shutil.which("shellcheck") is None, reason="shellcheck not installed (env/conda/check-tools.txt has it)"
)
def test_the_scripts_are_shellcheck_clean():
    scripts = [*SCRIPTS.values(), ROOT / "tools" / "gpu" / "node_script.sh"]
    done = subprocess.run(
        ["shellcheck", "-x", *map(str, scripts)], capture_output=True, text=True, cwd=ROOT / "tools" / "gpu"
    )
    assert done.returncode == 0, done.stdout
