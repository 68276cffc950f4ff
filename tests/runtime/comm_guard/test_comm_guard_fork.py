"""Forked and spawned children start with torch.distributed unpatched and the counters at zero."""

from __future__ import annotations

import multiprocessing as mp

import pytest
import torch
import torch.distributed as dist
from comm_guard_harness import run_world

from slime_flashqla import comm_guard

GIB = 1024**3


def _child_view(queue) -> None:
    """Report what the guard looks like in this (child) process."""
    import torch.distributed as dist

    from slime_flashqla import comm_guard

    queue.put(
        {
            "installed": comm_guard.is_installed(),
            "policy": comm_guard.active_policy(),
            "original": dist.all_reduce is dist.distributed_c10d.all_reduce,
            "pg_original": not hasattr(dist.ProcessGroup.allreduce, "__slime_flashqla_original__"),
            "stats": comm_guard.stats(),
        }
    )


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_child_process_starts_clean(start_method):
    comm_guard.install("always", probe=lambda: 64 * GIB, methods=True)
    comm_guard.stats()  # the parent's counters exist...
    comm_guard.guard._counts("all_reduce")[0] = 5  # ...and are non-zero
    ctx = mp.get_context(start_method)
    queue = ctx.Queue()
    child = ctx.Process(target=_child_view, args=(queue,), daemon=True)
    child.start()
    try:
        view = queue.get(timeout=120)
    finally:
        child.join(timeout=10)
        if child.is_alive():
            child.kill()
    assert view == {"installed": False, "policy": None, "original": True, "pg_original": True, "stats": {}}
    # the parent is untouched
    assert comm_guard.is_installed()
    assert comm_guard.active_policy() == "always"
    assert comm_guard.stats()["all_reduce"]["checked"] == 5


def _ranks_forked_from_a_guarded_parent(rank: int, world: int) -> dict:
    """Collectives in the child run unguarded until the child installs the guard itself."""
    dist.all_reduce(torch.ones(2))
    before = {"stats": comm_guard.stats(), "original": dist.all_reduce is dist.distributed_c10d.all_reduce}
    comm_guard.install("always", probe=lambda: 64 * GIB)
    dist.all_reduce(torch.ones(2))
    return {"before": before, "after": comm_guard.stats()}


@pytest.mark.distributed
def test_forked_ranks_install_their_own_guard():
    comm_guard.install("always", probe=lambda: 64 * GIB)
    for out in run_world(_ranks_forked_from_a_guarded_parent, 2):
        assert out["before"] == {"stats": {}, "original": True}
        assert out["after"] == {"all_reduce": {"checked": 1, "skipped": 0, "cleared": 0}}
