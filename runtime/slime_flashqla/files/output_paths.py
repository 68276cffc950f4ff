"""Output files of the CLI: checked before any work starts, written whole, and never written onto something else.

A command that runs for minutes and only then finds that its output path cannot be written
has lost its result, so every output path is checked first:

    dest = check_output_path(args.json, what="--json", suffixes=(".json",))   # before any work
    ...                                                                      # the long run
    publish_atomically(dest, lambda temp: temp.write_text(text))             # at the end

`check_output_path(path, *, what, suffixes=None) -> Path` refuses, with an OutputPathError (a
ValueError whose message is one line starting `<what> <path>:`, or `<path>:` for an empty `what`),
a path that is a directory, a device node, a FIFO, a socket or a symlink to one of those; a path
whose directory is missing or cannot be written (a file is created there and removed again, which also catches read-only
file systems and /proc); an existing file that is not writable; a name that ends in none of
`suffixes` (compared case-insensitively; `(".tar", ".tar.gz")` works for multi-part suffixes).
It returns the file that will be written: the path itself, or a symlink's target (the link
is written through and stays a link).

`publish_atomically(path, write, *, what="output") -> Path` calls `write(temp)` to fill a temp
file `.NAME.<pid>.<id>.tmp` beside the destination (files/atomic.py's rule), fsyncs it and renames it onto the
destination, which must then still be a regular file or nothing (anything else is refused,
never replaced). Readers see the old file or the new one, never part of one. The temp file
takes an existing file's permission bits, and is removed on any exception, Ctrl-C included,
and on SIGTERM (which then raises cli.termination.Terminated). A temp file that a killed
process (SIGKILL) left beside the same destination is removed by the next publish there.
`write` gets the temp file's path: it must take the format from the destination's name
(e.g. `savefig(temp, format="png")`), not from the temp's. Returns the path written.
"""

from __future__ import annotations

import contextlib
import glob
import os
import stat
from collections.abc import Callable
from pathlib import Path

from slime_flashqla.files.atomic import temporary_parts, temporary_path
from slime_flashqla.files.termination import sigterm_raises

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)
# Temp files this process is writing now: never swept as stale, although their pid is ours.
_WRITING: set[Path] = set()


class OutputPathError(ValueError):
    """An output path that cannot be written; the message is one line naming the option and the path."""


def _label(what: str, shown: str) -> str:
    return f"{what} {shown}" if what else shown


def _not_regular(mode: int) -> str | None:
    """What a non-regular file is ('a FIFO', ...), or None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    return next((kind for test, kind in _KINDS if test(mode)), "not a regular file")


def _refuse_non_regular(dest: Path, what: str, shown: str) -> os.stat_result | None:
    """The stat of `dest` if it is a regular file, None if nothing is there; refuse anything else."""
    try:
        status = os.lstat(dest)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise OutputPathError(f"{_label(what, shown)}: cannot look at it ({error.strerror})") from None
    if stat.S_ISLNK(status.st_mode):
        raise OutputPathError(f"{_label(what, shown)}: a symbolic link that leads nowhere (a loop); not replacing it")
    kind = _not_regular(status.st_mode)
    if kind:
        raise OutputPathError(f"{_label(what, shown)}: is {kind}, not a regular file; not replacing it")
    return status


def _destination(given: Path, what: str, shown: str) -> Path:
    """The file a write to `given` must replace: `given`, or the file its symlinks lead to."""
    # realpath follows every link and never raises; a loop leaves a link, refused below.
    dest = Path(os.path.realpath(given)) if given.is_symlink() else given
    _refuse_non_regular(dest, what, shown)
    return dest


def check_output_path(path, *, what: str, suffixes: tuple[str, ...] | None = None) -> Path:
    """The file to write for `path` (a symlink's target), or OutputPathError saying in one line why not."""
    shown = os.fspath(path)
    if not shown:
        raise OutputPathError(f"{what}: the path is empty")
    if shown.endswith(os.sep):
        raise OutputPathError(f"{_label(what, shown)}: names a directory; give a file name")
    given = Path(shown).expanduser()
    dest = _destination(given, what, shown)  # first: "is a character device" says more than a suffix
    if suffixes and not given.name.lower().endswith(tuple(suffix.lower() for suffix in suffixes)):
        raise OutputPathError(f"{_label(what, shown)}: the name must end in {', '.join(suffixes)}")
    if not dest.parent.is_dir():
        raise OutputPathError(f"{_label(what, shown)}: the directory {dest.parent} does not exist")
    probe = temporary_path(dest)
    try:  # access() says yes to root on /proc and on read-only mounts: creating a file is the test
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except OSError as error:
        raise OutputPathError(f"{_label(what, shown)}: cannot write in {dest.parent} ({error.strerror})") from None
    os.unlink(probe)
    if dest.exists() and not os.access(dest, os.W_OK):
        raise OutputPathError(f"{_label(what, shown)}: the file is not writable")
    return dest


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return False  # this process's own leftovers are stale, except what it writes now (_WRITING)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def _sweep_stale(dest: Path) -> None:
    """Remove temp files beside `dest` left by publishes whose process is gone (SIGKILL, a crash)."""
    for leftover in dest.parent.glob(glob.escape(f".{dest.name}.") + "*.tmp"):
        found = temporary_parts(leftover.name)
        if found and found[0] == dest.name and leftover not in _WRITING and not _alive(found[1]):
            with contextlib.suppress(OSError):
                leftover.unlink()


def publish_atomically(path, write: Callable[[Path], object], *, what: str = "output") -> Path:
    """Fill a temp file beside `path` with write(temp), then rename it onto `path`; returns the path written."""
    shown = os.fspath(path)
    dest = _destination(Path(shown).expanduser(), what, shown)
    _sweep_stale(dest)
    temp = temporary_path(dest)
    _WRITING.add(temp)
    try:
        with sigterm_raises():
            try:
                write(temp)
                with open(temp, "rb+") as handle:
                    os.fsync(handle.fileno())
                # Checked again: what was a regular file (or nothing) when the run started may not be now.
                existing = _refuse_non_regular(dest, what, shown)
                if existing is not None:
                    os.chmod(temp, stat.S_IMODE(existing.st_mode))
                os.replace(temp, dest)
            except BaseException:
                with contextlib.suppress(OSError):
                    temp.unlink()
                raise
    finally:
        _WRITING.discard(temp)
    with contextlib.suppress(OSError):  # the rename itself durable too, where the file system allows it
        descriptor = os.open(dest.parent, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
    return dest
