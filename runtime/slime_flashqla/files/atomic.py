"""One rule for temporary files and one atomic writer: a file appears whole under its name, or not at all.

Every temporary file this package writes is `.NAME.<pid>.<8 hex>.tmp`, beside the file NAME it
becomes: on the same filesystem, so the final os.replace is one atomic rename; a dot name, so
listings and `cache export` pass over it; the writer's pid, so a later writer can tell a dead
process's leftover (output_paths.py sweeps those); a random token, so two threads or processes
never write the same one.
"""

from __future__ import annotations

import contextlib
import os
import re
import uuid
from pathlib import Path

_TEMPORARY = re.compile(r"\.(?P<name>.+)\.(?P<pid>\d+)\.[0-9a-f]{8}\.tmp")


def temporary_path(dest: Path) -> Path:
    """A new temporary name for a file that will become `dest`, in `dest`'s directory."""
    dest = Path(dest)
    return dest.with_name(f".{dest.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")


def temporary_parts(name: str) -> tuple[str, int] | None:
    """(the name it will become, the writer's pid) for a temporary file's name, or None for any other name."""
    found = _TEMPORARY.fullmatch(name)
    return (found["name"], int(found["pid"])) if found else None


def is_temporary(name: str) -> bool:
    """Whether `name` is a temporary file's name under this package's rule."""
    return temporary_parts(name) is not None


def write_atomically(path, data: bytes | str) -> Path:
    """Write `data` (str as UTF-8) to a temporary beside `path`, fsync it, and rename it onto `path`; returns `path`."""
    path = Path(path)
    temp = temporary_path(path)
    try:
        with open(temp, "wb") as handle:
            handle.write(data.encode() if isinstance(data, str) else data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            temp.unlink()
        raise
    return path
