"""SIGTERM as an exception, so that what `docker stop` or Kubernetes sends runs the same cleanup as Ctrl-C.

Python's default SIGTERM ends the process at once: no `finally`, no `with` exit, so staging
directories and temp files stay behind. Within `sigterm_raises()`, SIGTERM raises `Terminated`
instead, which unwinds the stack like KeyboardInterrupt does; `slime-flashqla`'s `main` reports
it in one line and exits 143 (128 + SIGTERM), the status a process killed by SIGTERM has.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager

TERMINATED_EXIT = 128 + signal.SIGTERM


class Terminated(BaseException):
    """SIGTERM arrived; a BaseException, like KeyboardInterrupt, so `except Exception` does not swallow it."""


def _raise_terminated(signum, frame) -> None:
    raise Terminated("terminated by SIGTERM")


@contextmanager
def sigterm_raises():
    """Within the block, SIGTERM raises Terminated (main thread only; elsewhere signals cannot be handled)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous is _raise_terminated:  # an enclosing block already does it
        yield
        return
    signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        # None: a handler installed from C, which Python cannot put back; the default is the closest.
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
