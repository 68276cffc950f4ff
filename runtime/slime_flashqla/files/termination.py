"""SIGTERM as an exception, so that what `docker stop` or Kubernetes sends runs the same cleanup as Ctrl-C.

Python's default SIGTERM ends the process at once: no `finally`, no `with` exit, so staging
directories and temp files stay behind. Within `sigterm_raises()`, SIGTERM raises `Terminated`
instead, which unwinds the stack like KeyboardInterrupt does; `slime-flashqla`'s `main` reports
it in one line and exits 143 (128 + SIGTERM), the status a process killed by SIGTERM has.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from contextlib import contextmanager
from typing import TypeVar

T = TypeVar("T")

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


def interruptible(fn: Callable[[], T], poll_s: float = 0.1) -> T:
    """fn() in a daemon thread while the main thread waits for it, so that Ctrl-C and SIGTERM still stop the wait."""
    # Python runs signal handlers between bytecodes of the main thread only: inside a long C++ wait
    # (a TCP rendezvous for peers that never come) SIGTERM's handler never runs, and since it is
    # installed, the default action (ending the process) does not happen either. Waiting on a
    # thread, the main thread wakes every `poll_s` and raises; the abandoned call must hold nothing
    # that has to outlive the process (it ends with it, being a daemon).
    if threading.current_thread() is not threading.main_thread():
        return fn()
    outcome: dict = {}

    def call() -> None:
        try:
            outcome["value"] = fn()
        except BaseException as error:  # handed to the main thread, which raises it there
            outcome["error"] = error

    worker = threading.Thread(target=call, name="slime-flashqla-interruptible", daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(poll_s)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]
