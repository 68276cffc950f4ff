"""One temporary-name rule and one atomic writer (files/atomic.py): real files, a real concurrent reader."""

from __future__ import annotations

import os
import threading

import pytest

from slime_flashqla.files.atomic import is_temporary, temporary_path, write_atomically


def test_a_temporary_name_is_a_dot_name_beside_its_file_with_pid_and_token(tmp_path):
    dest = tmp_path / "record.json"
    first, second = temporary_path(dest), temporary_path(dest)
    assert first.parent == tmp_path and first != second  # threads and processes never share one
    assert first.name.startswith(".record.json.") and f".{os.getpid()}." in first.name
    assert is_temporary(first.name) and is_temporary(second.name)


@pytest.mark.parametrize("name", ["record.json", "kernels.tar.gz", ".hidden", "x.tmp", ".x.12.tmp", ".x.12.zz.tmp"])
def test_other_names_are_not_temporary(name):
    assert not is_temporary(name)


def test_write_atomically_replaces_the_file_whole_and_leaves_no_temporary(tmp_path):
    dest = tmp_path / "record.json"
    dest.write_text("old")
    assert write_atomically(dest, "new text") == dest
    assert dest.read_text() == "new text"
    write_atomically(dest, b"\x00bytes")
    assert dest.read_bytes() == b"\x00bytes"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["record.json"]


def test_a_reader_never_sees_part_of_a_file(tmp_path):
    dest = tmp_path / "record.json"
    big, small = b"a" * (8 << 20), b"b" * 10
    write_atomically(dest, small)
    seen, stop = set(), threading.Event()

    def read():
        while not stop.is_set():
            seen.add(len(dest.read_bytes()))

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for _ in range(10):
            write_atomically(dest, big)
            write_atomically(dest, small)
    finally:
        stop.set()
        reader.join()
    assert seen <= {len(big), len(small)}


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    (tmp_path / "dir").mkdir()
    with pytest.raises(IsADirectoryError):
        write_atomically(tmp_path / "dir", b"data")  # a directory is never replaced
    assert (tmp_path / "dir").is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir"]
