"""Exclusive locks between processes (files/lock.py): real flock on real files, never through a symbolic link."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from slime_flashqla.files.lock import LOCK_DIR, LockPathError, directory_lock


def holder(directory, key, seconds: float) -> subprocess.Popen:
    """Another process that takes the lock, says so on stdout, and holds it for `seconds`."""
    code = (
        "import sys, time; from slime_flashqla.files.lock import directory_lock; "
        f"lock = directory_lock(sys.argv[1], {key!r}); lock.__enter__(); print('held', flush=True); "
        f"time.sleep({seconds})"
    )
    process = subprocess.Popen([sys.executable, "-c", code, str(directory)], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline() == "held\n"
    return process


def test_a_second_process_waits_until_the_first_releases(tmp_path):
    first = holder(tmp_path, "k", 1.5)
    try:
        with directory_lock(tmp_path, "k") as waited:
            assert waited > 0.5  # it waited for the holder to exit
    finally:
        first.wait(timeout=30)


def test_locks_of_other_keys_do_not_wait(tmp_path):
    first = holder(tmp_path, "a", 30)
    try:
        start = time.perf_counter()
        with directory_lock(tmp_path, "b"):
            assert time.perf_counter() - start < 5
    finally:
        first.kill()
        first.wait(timeout=30)


def test_the_lock_folder_and_file_are_created_as_plain_files(tmp_path):
    with directory_lock(tmp_path / "new", "k"):
        assert (tmp_path / "new" / LOCK_DIR / "k.lock").is_file()
    assert not (tmp_path / "new" / LOCK_DIR / "k.lock").is_symlink()


@pytest.mark.parametrize("link", ["folder", "file", "dangling file"])
def test_a_symlink_in_place_of_the_folder_or_the_file_is_refused(tmp_path, link):
    outside = tmp_path / "outside"
    outside.mkdir()
    cache = tmp_path / "cache"
    cache.mkdir()
    if link == "folder":
        (cache / LOCK_DIR).symlink_to(outside)
        named = cache / LOCK_DIR
    else:
        (cache / LOCK_DIR).mkdir()
        named = cache / LOCK_DIR / "k.lock"
        (outside / "victim").write_text("kept")
        named.symlink_to(outside / ("victim" if link == "file" else "created"))
    with pytest.raises(LockPathError) as refused, directory_lock(cache, "k"):
        pass
    assert str(refused.value) == f"{named}: a symbolic link; a lock is never taken through one (remove it)"
    assert sorted(os.listdir(outside)) == ([] if link == "folder" else ["victim"])  # nothing created there
    if link == "file":
        assert (outside / "victim").read_text() == "kept"


def test_a_fifo_in_place_of_the_lock_file_is_refused(tmp_path):
    (tmp_path / LOCK_DIR).mkdir()
    os.mkfifo(tmp_path / LOCK_DIR / "k.lock")
    with pytest.raises(LockPathError, match=r"k.lock: a FIFO, not a regular file"), directory_lock(tmp_path, "k"):
        pass
