"""How much of the node `warmup` may use: CPUs and memory as this process sees them, and the job counts they allow.

A container or a batch job often gets less than the machine: CPUs through the affinity mask
(`taskset`, cpusets) or a CFS quota (`docker --cpus`, Kubernetes limits), memory through a
cgroup limit. Each is read as Linux exposes it; a file that is missing or unreadable means
no such limit. The sizes below are what one warm-up part was measured to take.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

GIB = 2**30
# A compiling warm-up part (one process: torch, CUDA, TileLang, FlashQLA) peaked at 2.7 GB RSS
# on an H200 node (2026-12-02, docs/benchmarks.md).
JOB_MEMORY = 3 * GIB
# Each further compile thread of a part: TVM's lowering in the process and its nvcc. Not measured
# apart; a part's result reports its peak RSS and its compilers' (warm-up JSON) to check it.
THREAD_MEMORY = 1 * GIB
MAX_JOBS = 256  # parts at once that `--jobs` accepts
MAX_THREADS = 64  # compile threads per part that `--compile-threads` accepts


@dataclass(frozen=True)
class NodeBudget:
    """What warm-up may use here."""

    cpus: int
    memory: int  # bytes available now

    def describe(self) -> str:
        return f"{self.cpus} CPU(s), {self.memory / GIB:.1f} GiB available"


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return None


def _cgroup_dirs(root: Path, controller: str) -> list[Path]:
    """Folders that may hold this process's cgroup files for `controller` (v2, then v1), most specific first."""
    base = root / "sys/fs/cgroup"
    paths: dict[str, str] = {}
    for line in (_read(root / "proc/self/cgroup") or "").splitlines():
        number, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if number == "0" and controllers == "":
            paths["v2"] = path
        elif controller in controllers.split(","):
            paths["v1"] = path
    found = []
    if "v2" in paths:
        found += [base / paths["v2"].lstrip("/"), base]
    for name in (controller, f"{controller},cpuacct", f"cpuacct,{controller}"):
        if (base / name).is_dir():
            found += [base / name / paths.get("v1", "/").lstrip("/"), base / name]
    return found


def _quota_cpus(root: Path) -> int | None:
    """CPUs a CFS quota allows (rounded up), or None without a quota."""
    for folder in _cgroup_dirs(root, "cpu"):
        text = _read(folder / "cpu.max")
        if text is not None:
            quota, period = ([*text.split(), "", ""])[:2]  # "max 100000" or "400000 100000"
            if quota.isdigit() and period.isdigit() and int(period) > 0:
                return max(1, math.ceil(int(quota) / int(period)))
            return None
        quota, period = _read(folder / "cpu.cfs_quota_us"), _read(folder / "cpu.cfs_period_us")
        if quota is not None and period is not None:
            quota, period = quota.strip(), period.strip()
            if quota.lstrip("-").isdigit() and int(quota) > 0 and period.isdigit() and int(period) > 0:
                return max(1, math.ceil(int(quota) / int(period)))
            return None
    return None


def usable_cpus(root: Path = Path("/"), affinity: set[int] | None = None) -> int:
    """CPUs this process may run on: its affinity mask, cut to its CFS quota."""
    cpus = len(os.sched_getaffinity(0) if affinity is None else affinity) or 1
    quota = _quota_cpus(Path(root))
    return min(cpus, quota) if quota else cpus


def _cgroup_memory_left(root: Path) -> int | None:
    """Bytes the memory cgroup still allows (limit minus usage), or None without a limit."""
    for folder in _cgroup_dirs(root, "memory"):
        for limit_name, usage_name in (
            ("memory.max", "memory.current"),
            ("memory.limit_in_bytes", "memory.usage_in_bytes"),
        ):
            limit, usage = _read(folder / limit_name), _read(folder / usage_name)
            if limit is None:
                continue
            limit = limit.strip()
            # cgroup v1 writes "no limit" as a huge number near 2**63.
            if not limit.isdigit() or int(limit) >= 2**60:
                return None
            used = int(usage.strip()) if usage and usage.strip().isdigit() else 0
            return max(0, int(limit) - used)
    return None


def available_memory(root: Path = Path("/")) -> int:
    """Bytes available for new processes: MemAvailable, cut to what the memory cgroup still allows."""
    available = None
    for line in (_read(Path(root) / "proc/meminfo") or "").splitlines():
        name, _, value = line.partition(":")
        if name == "MemAvailable" and value.split() and value.split()[0].isdigit():
            available = int(value.split()[0]) * 1024
    left = _cgroup_memory_left(Path(root))
    known = [value for value in (available, left) if value is not None]
    return min(known) if known else JOB_MEMORY  # nothing readable: room for one job, not a guess of more


def node_budget(root: Path = Path("/")) -> NodeBudget:
    """The CPUs and memory warm-up may use here."""
    return NodeBudget(usable_cpus(root), available_memory(root))


def default_jobs(parts: int, budget: NodeBudget) -> int:
    """Parts compiled at once: one per CPU, as many as the memory holds at JOB_MEMORY each, at most `parts`; >= 1."""
    return max(1, min(parts, budget.cpus, budget.memory // JOB_MEMORY, MAX_JOBS))


def default_threads(jobs: int, budget: NodeBudget) -> int:
    """Compile threads per part: the CPUs the jobs leave, as far as the memory beyond the jobs' holds them; >= 1."""
    spare = budget.memory - jobs * JOB_MEMORY
    by_memory = 1 + max(0, spare) // (jobs * THREAD_MEMORY)
    return max(1, min(MAX_THREADS, budget.cpus // jobs, by_memory))
