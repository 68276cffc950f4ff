"""The node budget `warmup` sizes its jobs by: CPUs and memory as Linux exposes them, read from real files."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from slime_flashqla.kernel_cache.capacity import (
    GIB,
    JOB_MEMORY,
    MAX_JOBS,
    NodeBudget,
    available_memory,
    default_jobs,
    default_threads,
    usable_cpus,
)


def tree(root, files: dict[str, str]):
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_cpus_are_the_affinity_mask_cut_to_a_cfs_quota(tmp_path):
    bare = tree(tmp_path / "bare", {"proc/self/cgroup": "0::/\n"})
    assert usable_cpus(bare, affinity=set(range(16))) == 16
    v2 = tree(tmp_path / "v2", {"proc/self/cgroup": "0::/job\n", "sys/fs/cgroup/job/cpu.max": "450000 100000\n"})
    assert usable_cpus(v2, affinity=set(range(16))) == 5  # 4.5 CPUs of quota: 5 processes keep it busy
    assert usable_cpus(v2, affinity={0, 1}) == 2
    unlimited = tree(tmp_path / "max", {"proc/self/cgroup": "0::/\n", "sys/fs/cgroup/cpu.max": "max 100000\n"})
    assert usable_cpus(unlimited, affinity=set(range(8))) == 8
    v1 = tree(
        tmp_path / "v1",
        {
            "proc/self/cgroup": "2:cpu,cpuacct:/pod\n",
            "sys/fs/cgroup/cpu,cpuacct/pod/cpu.cfs_quota_us": "200000\n",
            "sys/fs/cgroup/cpu,cpuacct/pod/cpu.cfs_period_us": "100000\n",
        },
    )
    assert usable_cpus(v1, affinity=set(range(64))) == 2
    v1_none = tree(
        tmp_path / "v1none",
        {
            "proc/self/cgroup": "2:cpu:/\n",
            "sys/fs/cgroup/cpu/cpu.cfs_quota_us": "-1\n",
            "sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000\n",
        },
    )
    assert usable_cpus(v1_none, affinity=set(range(12))) == 12


def test_memory_is_mem_available_cut_to_what_the_cgroup_still_allows(tmp_path):
    meminfo = "MemTotal:       131072000 kB\nMemAvailable:   125829120 kB\n"  # 120 GiB available
    host = tree(tmp_path / "host", {"proc/meminfo": meminfo, "proc/self/cgroup": "0::/\n"})
    assert available_memory(host) == 120 * GIB
    limited = tree(
        tmp_path / "v2",
        {
            "proc/meminfo": meminfo,
            "proc/self/cgroup": "0::/job\n",
            "sys/fs/cgroup/job/memory.max": f"{32 * GIB}\n",
            "sys/fs/cgroup/job/memory.current": f"{2 * GIB}\n",
        },
    )
    assert available_memory(limited) == 30 * GIB
    v1 = tree(
        tmp_path / "v1",
        {
            "proc/meminfo": meminfo,
            "proc/self/cgroup": "4:memory:/pod\n",
            "sys/fs/cgroup/memory/pod/memory.limit_in_bytes": "9223372036854771712\n",  # v1's "no limit"
            "sys/fs/cgroup/memory/pod/memory.usage_in_bytes": "1000\n",
        },
    )
    assert available_memory(v1) == 120 * GIB
    assert available_memory(tree(tmp_path / "nothing", {})) == JOB_MEMORY  # nothing readable: one job's worth


def test_this_machine_reads_as_something_sensible():
    assert 1 <= usable_cpus() <= (os.cpu_count() or 1)
    assert available_memory() > 0


def test_taskset_narrows_what_a_process_sees():
    code = "from slime_flashqla.kernel_cache.capacity import usable_cpus; print(usable_cpus())"
    try:
        done = subprocess.run(["taskset", "-c", "0", sys.executable, "-c", code], capture_output=True, text=True)
    except FileNotFoundError:
        pytest.skip("no taskset here")
    assert done.stdout.strip() == "1", done.stderr


@pytest.mark.parametrize(
    ("parts", "cpus", "gib", "jobs"),
    [
        (5, 16, 120, 5),  # 16/32 alone: every part at once
        (20, 16, 120, 16),  # qwen3-next at TP 1,2,4,8: one part per CPU
        (20, 16, 20, 6),  # the memory holds 6 parts at 3 GiB
        (20, 64, 1000, 20),  # never more than the parts
        (5, 16, 1, 1),  # too little memory for one: still one
        (5000, 1000, 100000, MAX_JOBS),
    ],
)
def test_the_default_job_count_follows_cpus_and_memory_within_bounds(parts, cpus, gib, jobs):
    assert default_jobs(parts, NodeBudget(cpus, gib * GIB)) == jobs


@pytest.mark.parametrize(
    ("jobs", "cpus", "gib", "threads"),
    [
        (5, 16, 120, 3),  # the CPUs the 5 parts leave
        (16, 16, 120, 1),  # a part per CPU: nothing left to share
        (1, 16, 120, 16),
        (2, 16, 8, 2),  # 8 GiB: 2 parts at 3 GiB, 2 GiB for one more thread each
        (1, 256, 1000, 64),  # at most 64
        (5, 16, 1, 1),
    ],
)
def test_compile_threads_per_part_share_what_the_jobs_leave(jobs, cpus, gib, threads):
    assert default_threads(jobs, NodeBudget(cpus, gib * GIB)) == threads
