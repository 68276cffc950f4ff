"""Progress of `bench stream`: per variant, the steps done and the last step's seconds, while the workers run.

A worker appends `STEP SECONDS` to its job's progress file after every step (`append_step`); the
parent reads the new lines while it waits (`ProgressFile`) and shows them: a rich bar per
variant on a terminal, else a plain line at the first step, every tenth of the steps and the
last, so a log shows where a long run is without a line per step.
"""

from __future__ import annotations

import sys
from pathlib import Path


def append_step(handle, index: int, seconds: float) -> None:
    """Record one finished step in a worker's progress file (flushed: the parent reads it live)."""
    handle.write(f"{index} {seconds!r}\n")
    handle.flush()


class ProgressFile:
    """Reads the steps a worker has appended since the last read."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def new_steps(self) -> list[tuple[int, float]]:
        """(step index, seconds) of every complete line written since the last call."""
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                data = handle.read()
        except FileNotFoundError:
            return []
        complete = data[: data.rfind(b"\n") + 1]  # a line still being written waits for the next read
        self.offset += len(complete)
        steps = []
        for line in complete.decode().splitlines():
            index, seconds = line.split()
            steps.append((int(index), float(seconds)))
        return steps


class StreamProgress:
    """Steps done per variant: rich bars on a terminal, plain lines otherwise; `note` prints beside them."""

    def __init__(self, console, steps: int) -> None:
        self.steps = steps
        self.bars = None
        if console is not None and console.is_terminal:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.bars = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[last]}"),
                TimeElapsedColumn(),
                console=console,
            )
        self.tasks: dict[str, int] = {}
        self.shown: dict[str, int] = {}

    def __enter__(self) -> StreamProgress:
        if self.bars is not None:
            self.bars.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.bars is not None:
            self.bars.stop()

    def start(self, label: str) -> None:
        """A variant's worker process has started."""
        if self.bars is not None:
            self.tasks[label] = self.bars.add_task(label, total=self.steps, last="starting")
        else:
            self.shown[label] = 0
            print(f"  {label}: started, {self.steps} steps", flush=True)

    def step(self, label: str, index: int, seconds: float) -> None:
        """Step `index` (0-based) of the variant took `seconds`."""
        done = index + 1
        if self.bars is not None:
            self.bars.update(self.tasks[label], completed=done, last=f"last step {_seconds(seconds)}")
            return
        tenth = max(1, self.steps // 10)
        if done in (1, self.steps) or done - self.shown[label] >= tenth:
            self.shown[label] = done
            print(f"  {label}: step {done}/{self.steps}, {_seconds(seconds)}", flush=True)

    def note(self, text: str) -> None:
        """A line of its own (a variant's summary), above the bars on a terminal."""
        if self.bars is not None:
            self.bars.console.print(text, highlight=False, markup=False)
        else:
            print(text, flush=True, file=sys.stdout)


def _seconds(value: float) -> str:
    return f"{value * 1e3:.1f} ms" if value < 1 else f"{value:.2f} s"
