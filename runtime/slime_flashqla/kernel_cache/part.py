"""One warm-up part in its own process: `python -m slime_flashqla.kernel_cache.part JOB.json`.

The job (written by kernel_cache/schedule.py) names the part, the cache and the settings; the
process warms the part (kernel_cache/warmup.py) and writes its result, with how much memory it
and its compilers took, to the job's result path. A failure is a result too: the scheduler
reports it and goes on with the other parts.
"""

from __future__ import annotations

import json
import resource
import sys
from dataclasses import asdict
from pathlib import Path

from slime_flashqla.kernel_cache.warmup import WarmupResult, WarmupTask, set_cache_dir, warm_up
from slime_flashqla.workload.heads import HeadConfig


def task_to_json(task: WarmupTask) -> dict:
    """The task as JSON (`task_from_json` reads it back)."""
    return {**asdict(task), "heads": [task.heads.key_heads, task.heads.value_heads]}


def task_from_json(data: dict) -> WarmupTask:
    """The task `task_to_json` wrote."""
    return WarmupTask(**{**data, "heads": HeadConfig(*data["heads"])})


def _peak_mib(who: int) -> float:
    return resource.getrusage(who).ru_maxrss / 1024  # Linux reports KiB


def run_part(job: dict) -> dict:
    """Warm the job's part; its result dict (a failure as `failed: ...`, never raised)."""
    task = task_from_json(job["task"])
    try:
        cache_dir = set_cache_dir(job["cache_dir"])
        result = warm_up(
            task,
            cache_dir,
            force=job["force"],
            lengths=tuple(tuple(batch) for batch in job["lengths"]),
            device=job["device"],
            compile_threads=job["compile_threads"],
        )
    except Exception as error:  # reported per part; the command exits non-zero
        import traceback

        traceback.print_exc()  # into the part's log, which a failure keeps
        result = WarmupResult(task.key, 0.0, 0.0, f"failed: {type(error).__name__}: {error}")
    result.peak_rss_mib = _peak_mib(resource.RUSAGE_SELF)
    result.compilers_peak_rss_mib = _peak_mib(resource.RUSAGE_CHILDREN)
    return asdict(result)


def main(argv: list[str] | None = None) -> int:
    """Run the part the job file names; write its result."""
    argv = sys.argv[1:] if argv is None else argv
    job = json.loads(Path(argv[0]).read_text())
    result = run_part(job)
    partial = Path(job["result"] + ".tmp")
    partial.write_text(json.dumps(result))
    partial.replace(job["result"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
