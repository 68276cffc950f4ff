"""`warmup`'s progress: parts done of all parts, and the slowest part still running.

On a terminal with rich, a bar whose text names the slowest running part; otherwise plain lines:
one when a part ends, and one every `quiet_seconds` while none ends, so a log of a long cold
warm-up shows what it is waiting for.
"""

from __future__ import annotations

import sys
import time

QUIET_SECONDS = 60.0  # plain output: a line at least this often while parts run


def running_words(running: dict[str, float], now: float) -> str:
    """'running: torch 2/4 layer 80 s (slowest), 2 more', or 'none running'; `running` maps label to start time."""
    if not running:
        return "none running"
    label, started = min(running.items(), key=lambda item: item[1])
    more = f", {len(running) - 1} more" if len(running) > 1 else ""
    return f"running: {label} {now - started:.0f} s (slowest){more}"


class WarmupProgress:
    """Parts done of `total`; `finished` when a part ends, `tick` while parts run."""

    def __init__(self, total: int, console=None, *, out=None, now=time.monotonic, quiet_seconds=QUIET_SECONDS):
        self.total, self.done = total, 0
        self.out = out or sys.stdout
        self.now = now
        self.quiet_seconds = quiet_seconds
        self.last_line = now()
        self.bars = None
        if console is not None and console.is_terminal:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.bars = Progress(
                TextColumn("parts"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                TextColumn("{task.fields[running]}"), console=console,
            )  # fmt: skip
            self.bar = self.bars.add_task("parts", total=total, running="starting")

    def __enter__(self) -> WarmupProgress:
        if self.bars is not None:
            self.bars.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.bars is not None:
            self.bars.stop()

    def _line(self, text: str) -> None:
        if self.bars is not None:
            self.bars.console.print(text, highlight=False, markup=False)
        else:
            print(text, file=self.out, flush=True)
        self.last_line = self.now()

    def finished(self, label: str, outcome: str, running: dict[str, float]) -> None:
        """The part `label` ended with `outcome`; `running` are the parts still running (label -> start)."""
        self.done += 1
        self._line(f"  [{self.done}/{self.total}] {label}: {outcome}; {running_words(running, self.now())}")
        if self.bars is not None:
            self.bars.update(self.bar, completed=self.done, running=running_words(running, self.now()))

    def tick(self, running: dict[str, float]) -> None:
        """Parts still running: the bar's text now, a plain line when none was printed for a while."""
        now = self.now()
        if self.bars is not None:
            self.bars.update(self.bar, running=running_words(running, now))
        elif running and now - self.last_line >= self.quiet_seconds:
            self._line(f"  [{self.done}/{self.total}] {running_words(running, now)}")
