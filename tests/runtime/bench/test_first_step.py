"""`python -m slime_flashqla.bench.first_step`: refused in one line where it cannot run, and its help."""

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
    """Issue 35 item 7: two raw tracebacks (the child's and the parent's), exit 1."""
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
