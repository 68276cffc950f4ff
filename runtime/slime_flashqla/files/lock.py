"""Exclusive locks between processes: one lock file per key in a directory's `slime-flashqla-locks/` folder.

    with directory_lock(cache_dir, "cache-import") as waited:   # waits for any other holder
        ...

The kernel cache's warm-up (one lock per configuration) and its archive import take their
locks here. A lock is an flock on `<directory>/slime-flashqla-locks/<key>.lock`, released when
the file closes, also when the process dies. The folder and the file are opened without
following symbolic links (O_NOFOLLOW, the file relative to the folder's descriptor), so a link
placed in a shared cache cannot make a lock create or open a file elsewhere; a link, or a
file that is not a regular one, is refused with a LockPathError (a ValueError, one line).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

LOCK_DIR = "slime-flashqla-locks"
_LINKED = "a symbolic link; a lock is never taken through one (remove it)"


class LockPathError(ValueError):
    """A lock folder or lock file that is a link or not what it should be; the message is one line naming it."""


_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISREG, "a regular file"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def _refuse_unless(path: Path, mode: int, kind: str) -> None:
    """Refuse `path` (of st_mode `mode`) unless it is `kind`, naming a symbolic link as such."""
    if stat.S_ISLNK(mode):
        raise LockPathError(f"{path}: {_LINKED}")
    found = next((name for test, name in _KINDS if test(mode)), "something else")
    if found != kind:
        raise LockPathError(f"{path}: {found}, not {kind}")


def _open_nofollow(path: Path, flags: int, kind: str, *, dir_fd: int | None = None) -> int:
    """os.open that never follows a final symbolic link; a link or another kind of file is refused by name."""
    try:
        fd = os.open(path.name if dir_fd is not None else path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666,
                     dir_fd=dir_fd)  # fmt: skip
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENOTDIR):  # a link; not a directory (O_DIRECTORY)
            _refuse_unless(path, os.lstat(path).st_mode, kind)
        raise
    try:
        _refuse_unless(path, os.fstat(fd).st_mode, kind)
    except LockPathError:
        os.close(fd)
        raise
    return fd


@contextlib.contextmanager
def directory_lock(directory, key: str) -> Iterator[float]:
    """Hold the exclusive lock `key` of `directory`; yields the seconds spent waiting for it."""
    folder = Path(directory) / LOCK_DIR
    with contextlib.suppress(FileExistsError):  # a link or a file there: refused by name below
        folder.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    folder_fd = _open_nofollow(folder, os.O_RDONLY | os.O_DIRECTORY, "a directory")
    try:
        # Opened relative to the folder's descriptor: the folder cannot be swapped for a link meanwhile.
        # O_NONBLOCK: a FIFO put in the file's place opens at once, and is then refused.
        fd = _open_nofollow(folder / f"{key}.lock", os.O_RDWR | os.O_CREAT | os.O_NONBLOCK, "a regular file",
                            dir_fd=folder_fd)  # fmt: skip
    finally:
        os.close(folder_fd)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # released when the file closes, also if the process dies
        yield time.perf_counter() - start
    finally:
        os.close(fd)
