"""Run warm-up parts as processes, `jobs` at once, longest first; a part that fails is reported and the others go on.

Each part is `python -m slime_flashqla.kernel_cache.part JOB.json` in a session of its own,
its output in a log in the run's temp folder. A part that fails (its own error, or its process
killed, for example by the OOM killer) keeps its log (files/child_logs.py) and its result says
how it ended and where the log is. Ctrl-C or SIGTERM stops every part with its compilers (the
whole session) before the command exits.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from slime_flashqla.files.child_logs import KeptLogs, exit_words, log_tail
from slime_flashqla.kernel_cache.part import task_to_json
from slime_flashqla.kernel_cache.warmup import WarmupResult, WarmupTask, in_start_order

POLL_SECONDS = 0.2


@dataclass
class PartSettings:
    """What every part of one run shares."""

    cache_dir: str
    force: bool
    lengths: tuple
    device: str
    compile_threads: int


@dataclass
class _Running:
    task: WarmupTask
    process: subprocess.Popen
    started: float
    log: Path
    result: Path


def _start(task: WarmupTask, settings: PartSettings, workdir: Path) -> _Running:
    stem = workdir / task.key
    job, result, log = stem.with_suffix(".job.json"), stem.with_suffix(".result.json"), stem.with_suffix(".log")
    job.write_text(json.dumps({"task": task_to_json(task), **asdict(settings), "result": str(result)}))
    with open(log, "w") as handle:
        # A session of its own: stopping the part stops the compilers it started too.
        process = subprocess.Popen(
            [sys.executable, "-m", "slime_flashqla.kernel_cache.part", str(job)],
            stdout=handle, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
    return _Running(task, process, time.monotonic(), log, result)


def _stop(process: subprocess.Popen) -> None:
    """Kill a part's whole session (the part and its compilers) and reap the part."""
    with contextlib.suppress(ProcessLookupError, PermissionError):  # already gone
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _outcome(part: _Running, logs: KeptLogs) -> dict:
    """The part's result dict; a failure keeps its log and says where, and how the process ended."""
    try:
        result = json.loads(part.result.read_text())
    except (OSError, ValueError):
        ended = f"failed: the part's process {exit_words(part.process.returncode)} and wrote no result"
        result = asdict(WarmupResult(part.task.key, time.monotonic() - part.started, 0.0, ended))
    if result["status"].startswith("failed"):
        tail = log_tail(part.log)
        kept = logs.keep(part.log, part.task.key)
        last = f"; last log line: {tail[-1]}" if tail else ""
        result["status"] += f"{last} (log: {kept})" if kept else last
        result["log"], result["log_tail"] = (str(kept) if kept else None), tail
    return result


def run_parts(tasks, settings: PartSettings, jobs: int, progress, keep_logs_beside: Path | None = None) -> list[dict]:
    """Warm every task, `jobs` processes at once, longest first; their result dicts in the order they ended."""
    pending = in_start_order(tasks)
    running: list[_Running] = []
    results: list[dict] = []
    logs = KeptLogs(keep_logs_beside, "slime-flashqla-warmup-logs-")
    with tempfile.TemporaryDirectory(prefix="slime-flashqla-warmup-") as tmp:
        try:
            while pending or running:
                while pending and len(running) < jobs:
                    running.append(_start(pending.pop(0), settings, Path(tmp)))
                for part in [part for part in running if part.process.poll() is not None]:
                    running.remove(part)
                    result = _outcome(part, logs)
                    results.append(result)
                    progress.finished(part.task.label, _outcome_words(result), _labels(running))
                progress.tick(_labels(running))
                if running:
                    time.sleep(POLL_SECONDS)
        finally:
            for part in running:  # Ctrl-C, SIGTERM or an error of ours: no part outlives the command
                _stop(part.process)
    return results


def _labels(running: list[_Running]) -> dict[str, float]:
    return {part.task.label: part.started for part in running}


def _outcome_words(result: dict) -> str:
    if result["status"].startswith("failed"):
        return result["status"]
    return f"{result['status']} in {result['seconds']:.1f} s"
