"""Tables where stdout is not a terminal (issue 35 item 21): the width there is, or plain rows; never 200 columns."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios

BOX = set("┏┃┡│└━─╇┩┳")


def doctor(env: dict, stderr=subprocess.PIPE) -> str:
    """`slime-flashqla doctor`'s stdout, read through a pipe (as `doctor | head` reads it)."""
    done = subprocess.run(
        [sys.executable, "-m", "slime_flashqla", "doctor"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert done.returncode == 0
    return done.stdout


def environment(**extra) -> dict:
    return {**{k: v for k, v in os.environ.items() if k != "COLUMNS"}, **extra}


def test_columns_sets_the_width_of_a_piped_table():
    out = doctor(environment(COLUMNS="100"))
    assert BOX & set(out)
    assert max(len(line) for line in out.splitlines()) <= 100


def test_a_pipe_inside_a_terminal_takes_the_terminals_width():
    """`doctor | head -30` in a 90-column terminal: stdout is a pipe, stderr is still the terminal."""
    leader, follower = pty.openpty()
    try:
        fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 90, 0, 0))
        out = doctor(environment(), stderr=follower)
    finally:
        os.close(follower)
        os.close(leader)
    assert BOX & set(out)
    assert max(len(line) for line in out.splitlines()) <= 90


def test_no_terminal_at_all_gives_plain_rows():
    """A log file or CI: one plain row per item, whole, that grep finds."""
    out = doctor(environment())
    assert not BOX & set(out)
    lines = out.splitlines()
    assert lines[0] == "slime-flashqla doctor"
    assert any(line.split()[:2] == ["torch", "CUDA"] or line.startswith("  torch ") for line in lines[1:])
    assert any(line.startswith("  'auto' runs ") for line in lines)
