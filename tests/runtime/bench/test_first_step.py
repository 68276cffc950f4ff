"""`python -m slime_flashqla.bench.first_step`: one-line refusals, its help, and its import-time table."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

MODULE = (sys.executable, "-m", "slime_flashqla.bench.first_step")


def run(*args):
    return subprocess.run([*MODULE, *args], capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(torch.cuda.is_available(), reason="describes a machine without a GPU")
def test_without_a_gpu_it_says_so_in_one_line_and_exits_2():
    """Without a GPU it says so in one line, exit 2, with no traceback from child or parent (issue 35 item 7)."""
    done = run()
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "needs a CUDA GPU" in lines[0] and "Traceback" not in done.stderr
    assert done.stdout == ""


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--backend", "nope"), "unknown GDN backend 'nope'"),
        (("--heads", "16/30"), "multiple of Hk"),
        (("--lengths", "8192+-1"), "--lengths"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, words):
    done = run(*args)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and "Traceback" not in done.stderr


def test_help_names_the_module_describes_it_and_gives_each_default():
    done = run("--help")
    assert done.returncode == 0
    assert done.stdout.startswith("usage: python -m slime_flashqla.bench.first_step")
    assert "Time to the first GDN layer forward+backward" in done.stdout
    text = " ".join(done.stdout.split())
    for default in ("(default flashqla)", "(default 16/32)", "(default 8192+24576)"):
        assert default in text, default


def test_the_first_rl_step_script_runs_on_a_cpu_and_tables_each_phase(tmp_path):
    """tools/gpu/first_rl_step.py (issue 31's measurement) as a smoke test: the torch backend, small sizes."""
    import json
    from pathlib import Path

    script = Path(__file__).parents[3] / "tools" / "gpu" / "first_rl_step.py"
    done = subprocess.run(
        [sys.executable, str(script), "--device", "cpu", "--heads", "2/4", "--lengths", "200+56", "--hidden-size",
         "64", "--head-dim", "16", "--runs", "1", "--json", str(tmp_path / "r.json")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    (run,) = json.loads((tmp_path / "r.json").read_text())["runs"]
    phases = [row["phase"] for row in run["rows"]]
    assert phases[1:4] == ["import torch", "import slime_flashqla", "cuda init, layer and inputs"]
    assert phases[4:7] == ["step 0 no-grad #1", "step 0 no-grad #2", "step 0 train"]
    assert run["to_end_of_first_rl_step_s"] > sum(row["seconds"] for row in run["rows"][4:7])
    assert "torch" in run["rows"][1]["imports"]  # -X importtime lines land in the phase that imported them
    assert "| step 0 no-grad #1 |" in done.stdout and "to the end of the first RL step" in done.stdout


def test_the_first_rl_step_script_refuses_a_machine_without_a_gpu_in_one_line():
    from pathlib import Path

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    script = Path(__file__).parents[3] / "tools" / "gpu" / "first_rl_step.py"
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1 and "needs a CUDA GPU" in done.stderr


def test_import_seconds_are_itemised_by_package_from_a_real_importtime_run():
    from slime_flashqla.bench.first_step import OTHER, imports_by_package

    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import json, email.mime.text, slime_flashqla.gdn.api"],
        capture_output=True,
        text=True,
        check=True,
    )
    lines = done.stderr.splitlines()
    seconds = imports_by_package(lines)
    assert "torch" in seconds and OTHER in seconds  # json and email are a few ms: summed
    shown = [value for name, value in seconds.items() if name != OTHER]
    assert shown == sorted(shown, reverse=True) and min(shown) >= 0.01
    # each module's own time once: the packages add up to the sum of every module's self time
    total = sum(int(line.split("|")[0].split(":")[1]) for line in lines[1:] if line.startswith("import time:"))
    assert sum(seconds.values()) == pytest.approx(total / 1e6, abs=1e-3 * len(seconds))
