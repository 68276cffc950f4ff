"""The CLI's output files: what `check_output_path` refuses before any work, and what `publish_atomically` writes.

Real files of every kind (FIFOs, device nodes where this user may make them, symlinks, /proc), and a real
child process killed with SIGTERM while it writes.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from slime_flashqla.files.output_paths import OutputPathError, check_output_path, publish_atomically


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def device_node(path: Path) -> Path:
    """A character device like /dev/null at `path`, or a skip where this user may not make one."""
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("making a device node needs CAP_MKNOD")
    return path


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda p: p.mkdir(), "is a directory"),
        (lambda p: os.mkfifo(p), "is a FIFO"),
        (device_node, "is a character device"),
    ],
)
def test_a_path_that_is_not_a_regular_file_is_refused_and_kept(tmp_path, make, says):
    target = tmp_path / "out.json"
    make(target)
    kind = stat.S_IFMT(os.lstat(target).st_mode)
    link = tmp_path / "link.json"
    link.symlink_to(target)
    for path in (target, link):
        with pytest.raises(OutputPathError, match=f"^--json {path}: {says}, not a regular file"):
            check_output_path(path, what="--json")
        with pytest.raises(OutputPathError, match=says):
            publish_atomically(path, lambda temp: temp.write_text("{}"))
    assert stat.S_IFMT(os.lstat(target).st_mode) == kind and link.is_symlink()
    assert leftovers(tmp_path) == []


def test_a_symlink_to_a_regular_file_is_written_through(tmp_path):
    (tmp_path / "real.tar").write_text("keep")
    link = tmp_path / "link.tar"
    link.symlink_to("real.tar")
    dest = check_output_path(link, what="archive", suffixes=(".tar",))
    assert dest == tmp_path / "real.tar"
    assert publish_atomically(link, lambda temp: temp.write_text("new")) == tmp_path / "real.tar"
    assert link.is_symlink() and (tmp_path / "real.tar").read_text() == "new"
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to("made.json")
    publish_atomically(check_output_path(dangling, what="--json"), lambda temp: temp.write_text("{}"))
    assert dangling.is_symlink() and (tmp_path / "made.json").read_text() == "{}"
    loop = tmp_path / "loop.json"
    loop.symlink_to("loop.json")
    with pytest.raises(OutputPathError, match="leads nowhere"):
        check_output_path(loop, what="--json")


def test_a_directory_that_cannot_hold_the_file_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(OutputPathError, match=r"^--json nodir/x.json: the directory nodir does not exist$"):
        check_output_path("nodir/x.json", what="--json")
    with pytest.raises(OutputPathError, match="names a directory"):
        check_output_path("sub/", what="--json")
    with pytest.raises(OutputPathError, match="the path is empty"):
        check_output_path("", what="--json")
    # /proc/version is a regular file, but nobody (root included) can create a file beside it.
    with pytest.raises(OutputPathError, match=r"^--json /proc/version: cannot write in /proc \("):
        check_output_path("/proc/version", what="--json")
    assert [p for p in Path("/proc").iterdir() if p.name.startswith(".version")] == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write any file")
def test_a_file_this_user_cannot_write_is_refused(tmp_path):
    (tmp_path / "ro.json").write_text("{}")
    (tmp_path / "ro.json").chmod(0o444)
    with pytest.raises(OutputPathError, match="not writable"):
        check_output_path(tmp_path / "ro.json", what="--json")


def test_the_name_must_carry_a_suffix_it_is_written_in(tmp_path):
    suffixes = (".tar", ".tar.gz", ".tgz")
    for good in ("a.tar", "a.TAR.GZ", "b.tgz"):
        assert check_output_path(tmp_path / good, what="archive", suffixes=suffixes) == tmp_path / good
    for bad in ("a.zip", "a", "a.tar.", "a.gz"):
        with pytest.raises(OutputPathError, match=r"the name must end in \.tar, \.tar\.gz, \.tgz$"):
            check_output_path(tmp_path / bad, what="archive", suffixes=suffixes)
    assert list(tmp_path.iterdir()) == []  # checking writes nothing


def test_publish_replaces_a_file_whole_and_keeps_its_mode(tmp_path):
    out = tmp_path / "out.json"
    out.write_text("old")
    out.chmod(0o640)
    assert publish_atomically(out, lambda temp: temp.write_text("new")) == out
    assert out.read_text() == "new" and stat.S_IMODE(out.stat().st_mode) == 0o640
    assert leftovers(tmp_path) == []


def test_a_failed_write_leaves_the_old_file_and_no_temp(tmp_path):
    out = tmp_path / "out.json"
    out.write_text("old")

    def fails(temp: Path) -> None:
        temp.write_text("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        publish_atomically(out, fails)
    assert out.read_text() == "old" and leftovers(tmp_path) == []


def test_a_fifo_that_appears_during_the_run_is_not_replaced(tmp_path):
    out = tmp_path / "out.json"
    dest = check_output_path(out, what="--json")

    def meanwhile(temp: Path) -> None:
        temp.write_text("{}")
        os.mkfifo(out)  # what the run started with (nothing) is not what is there at the end

    with pytest.raises(OutputPathError, match="is a FIFO"):
        publish_atomically(dest, meanwhile)
    assert stat.S_ISFIFO(os.lstat(out).st_mode) and leftovers(tmp_path) == []


def test_temps_of_dead_processes_are_swept_and_others_kept(tmp_path):
    out = tmp_path / "out.json"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        stale = tmp_path / f".out.json.{dead.pid}.0123abcd.tmp"
        running = tmp_path / f".out.json.{alive.pid}.89abcdef.tmp"
        other = tmp_path / f".other.json.{dead.pid}.0123abcd.tmp"
        for path in (stale, running, other):
            path.write_text("x")
        publish_atomically(out, lambda temp: temp.write_text("{}"))
        assert not stale.exists() and running.exists() and other.exists()
    finally:
        alive.kill()
        alive.wait()


CHILD = """
import sys, time
from pathlib import Path
from slime_flashqla.files.output_paths import publish_atomically
from slime_flashqla.files.termination import Terminated

out, ready = Path(sys.argv[1]), Path(sys.argv[2])

def slow(temp):
    with open(temp, "w") as handle:
        handle.write("part")
        handle.flush()
        ready.write_text(temp.name)
        time.sleep(60)

try:
    publish_atomically(out, slow)
except Terminated:
    sys.exit(143)
"""


def test_sigterm_during_the_write_removes_the_temp_and_keeps_the_old_file(tmp_path):
    out, ready = tmp_path / "out.json", tmp_path / "ready"
    out.write_text("old")
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(CHILD), out, ready])
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert child.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
        assert (tmp_path / ready.read_text()).read_text() == "part"  # the temp is there, half written
        child.send_signal(signal.SIGTERM)
        assert child.wait(timeout=60) == 143
    finally:
        child.kill()
    assert out.read_text() == "old" and leftovers(tmp_path) == []
