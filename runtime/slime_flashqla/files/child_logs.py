"""A failed child process, told to the user: how it ended in words, and its log kept where they can read it.

The benchmarks and `warmup` run their work in child processes whose output goes to a log in the
run's temp folder, which is removed when the command ends; a failure's message must not point there.
"""

from __future__ import annotations

import shutil
import signal
import tempfile
from pathlib import Path

TAIL_LINES = 20  # the last lines of a failed child's log carried in a JSON report


def exit_words(returncode: int) -> str:
    """How a child ended: 'exited with 1', 'was killed by SIGKILL (out of memory?)', 'was killed by SIGSEGV'."""
    if returncode >= 0:
        return f"exited with {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    # The kernel's OOM killer sends SIGKILL; so does a user, but memory is what to check first.
    return f"was killed by {name}" + (" (out of memory?)" if -returncode == signal.SIGKILL else "")


def log_tail(path: Path, lines: int = TAIL_LINES) -> list[str]:
    """The last `lines` non-blank-ended lines of a log, [] when it cannot be read."""
    try:
        return path.read_text(errors="replace").strip().splitlines()[-lines:]
    except OSError:
        return []


class KeptLogs:
    """Copies failed children's logs out of a temp folder: beside `beside` (NAME.TAG.log), else into a kept folder.

    The kept folder (`<tmp>/<prefix>XXXX`) is made at the first failure only, so a run that
    fails nothing leaves nothing behind.
    """

    def __init__(self, beside: Path | None, prefix: str) -> None:
        self.beside = beside
        self.prefix = prefix
        self.folder: Path | None = None

    def keep(self, log: Path, tag: str) -> Path | None:
        """Copy `log` for the child named `tag`; its new path, or None when there was no log to keep."""
        if not log.is_file():
            return None
        if self.beside is not None:
            target = self.beside.with_name(f"{self.beside.stem}.{tag}.log")
        else:
            if self.folder is None:
                self.folder = Path(tempfile.mkdtemp(prefix=self.prefix))
            target = self.folder / f"{tag}.log"
        try:
            shutil.copyfile(log, target)
        except OSError:
            return None
        return target
