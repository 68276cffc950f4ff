"""Probe counts per policy on real gloo ranks: which calls consult the probe, and when memory is freed."""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist
from comm_guard_harness import run_world

from slime_flashqla import comm_guard

pytestmark = pytest.mark.distributed

GIB = 1024**3


class CountingProbe:
    """A probe reporting a fixed amount of free memory and counting how often it is consulted."""

    def __init__(self, free_bytes):
        self.free_bytes = free_bytes
        self.calls = 0

    def __call__(self):
        self.calls += 1
        return self.free_bytes


def _steady_sequence(rank: int, world: int) -> None:
    """A fixed mix of calls: repeated ops on WORLD, a new group, direct ProcessGroup calls, p2p."""
    t = torch.ones(4)
    for _ in range(3):
        dist.all_reduce(t)
        dist.all_gather_into_tensor(torch.empty(4 * world), t)
    for _ in range(2):
        dist.barrier()
        dist.broadcast(t, src=0)
    group = dist.new_group(list(range(world)))
    for _ in range(2):
        dist.all_reduce(t, group=group)
    dist.all_reduce(t)  # WORLD again, after a group was created
    pg = dist.distributed_c10d._get_default_group()
    for _ in range(2):
        pg.allreduce([t]).wait()
    peer = 1 - rank
    for _ in range(2):
        works = [dist.isend(t, peer), dist.irecv(torch.empty(4), peer)]
        for w in works:
            w.wait()


def _per_policy(rank: int, world: int, methods: bool = True) -> dict:
    """Run the steady sequence under each policy; return stats and probe calls per policy."""
    out = {}
    for policy in comm_guard.POLICIES:
        probe = CountingProbe(64 * GIB)
        comm_guard.install(policy, probe=probe, methods=methods)
        comm_guard.reset_stats()
        _steady_sequence(rank, world)
        out[policy] = {"stats": comm_guard.stats(), "probes": probe.calls}
        comm_guard.uninstall()
    return out


def _s(checked, skipped, cleared=0):
    return {"checked": checked, "skipped": skipped, "cleared": cleared}


# Calls per op in _steady_sequence: all_reduce 3 + 2 (group) + 1, all_gather_into_tensor 3,
# barrier 2, broadcast 2, ProcessGroup.allreduce 2, isend 2, irecv 2.
EXPECTED = {
    "always": {
        "all_reduce": _s(6, 0),
        "all_gather_into_tensor": _s(3, 0),
        "barrier": _s(2, 0),
        "broadcast": _s(2, 0),
        "allreduce": _s(2, 0),
        "isend": _s(2, 0),
        "irecv": _s(2, 0),
    },
    "whitelist": {
        "all_reduce": _s(6, 0),
        "all_gather_into_tensor": _s(0, 3),
        "barrier": _s(0, 2),
        "broadcast": _s(2, 0),
        "allreduce": _s(2, 0),  # slime's list never matches the ProcessGroup method names
        "isend": _s(0, 2),
        "irecv": _s(0, 2),
    },
    "first-use": {
        # WORLD once, the new group once, WORLD again because creating a group re-arms
        "all_reduce": _s(3, 3),
        "all_gather_into_tensor": _s(1, 2),
        "barrier": _s(1, 1),
        "broadcast": _s(1, 1),
        "allreduce": _s(1, 1),
        "isend": _s(1, 1),
        "irecv": _s(1, 1),
    },
    "off": {
        "all_reduce": _s(0, 6),
        "all_gather_into_tensor": _s(0, 3),
        "barrier": _s(0, 2),
        "broadcast": _s(0, 2),
        "allreduce": _s(0, 2),
        "isend": _s(0, 2),
        "irecv": _s(0, 2),
    },
}


def test_probe_counts_per_policy():
    for rank, result in enumerate(run_world(_per_policy, 2)):
        for policy, expected in EXPECTED.items():
            got = result[policy]
            assert got["stats"] == expected, f"rank {rank}, policy {policy}"
            assert got["probes"] == sum(s["checked"] for s in expected.values()), f"rank {rank}, {policy}"


def _per_policy_without_methods(rank: int, world: int) -> dict:
    return _per_policy(rank, world, methods=False)


def test_direct_process_group_calls_pass_unguarded_unless_methods_are_asked_for():
    for rank, result in enumerate(run_world(_per_policy_without_methods, 2)):
        for policy, expected in EXPECTED.items():
            without = {name: s for name, s in expected.items() if name != "allreduce"}
            got = result[policy]
            assert got["stats"] == without, f"rank {rank}, policy {policy}"
            assert got["probes"] == sum(s["checked"] for s in without.values()), f"rank {rank}, {policy}"


def _rearm_events(rank: int, world: int) -> dict:
    """Count first-use probes of all_reduce around each event that re-arms it."""
    probe = CountingProbe(64 * GIB)
    comm_guard.install("first-use", probe=probe)
    t = torch.ones(2)
    seen = {}

    def step(label, group=None):
        before = probe.calls
        dist.all_reduce(t, group=group)
        dist.all_reduce(t, group=group)
        seen[label] = probe.calls - before

    step("first call")
    step("steady")
    group = dist.new_group(list(range(world)))
    step("new group", group)
    step("new group, steady", group)
    dist.destroy_process_group(group)
    step("after destroying a group")
    comm_guard.rearm()
    step("after rearm()")
    comm_guard.install("first-use", probe=probe)
    step("after a second install")
    step("steady again")
    return seen


def test_first_use_rearms_on_group_lifecycle_rearm_and_install():
    expected = {
        "first call": 1,
        "steady": 0,
        "new group": 1,
        "new group, steady": 0,
        "after destroying a group": 1,
        "after rearm()": 1,
        "after a second install": 1,
        "steady again": 0,
    }
    for seen in run_world(_rearm_events, 2):
        assert seen == expected


def _first_use_p2p_per_peer(rank: int, world: int) -> dict:
    """first-use keys point-to-point ops on the peer: a new peer is probed, a known one is not."""
    probe = CountingProbe(64 * GIB)
    comm_guard.install("first-use", probe=probe)
    counts = []
    t = torch.full((2,), float(rank))
    for step in (1, 1, 2, 2, 1):  # ring distance: next rank, then the one after it
        before = probe.calls
        works = [dist.isend(t, (rank + step) % world), dist.irecv(torch.empty(2), (rank - step) % world)]
        for w in works:
            w.wait()
        counts.append(probe.calls - before)
    return counts


def test_first_use_probes_each_new_p2p_peer_once():
    for counts in run_world(_first_use_p2p_per_peer, 4):
        assert counts == [2, 0, 2, 0, 0]  # isend + irecv on the first use of each peer pair


def _threshold(rank: int, world: int) -> dict:
    """Whether memory gets freed for a probe below, above, or without a reading."""
    out = {}
    for label, free in (("below", 1 * GIB), ("above", 4 * GIB), ("unknown", None)):
        comm_guard.install("always", threshold_gb=3.0, probe=CountingProbe(free))
        comm_guard.reset_stats()
        dist.all_reduce(torch.ones(2))
        out[label] = comm_guard.stats()["all_reduce"]
    comm_guard.install("always", threshold_gb=0.5, probe=CountingProbe(1 * GIB))
    comm_guard.reset_stats()
    dist.all_reduce(torch.ones(2))
    out["below, lower threshold"] = comm_guard.stats()["all_reduce"]
    return out


def test_threshold_decides_clearing():
    for out in run_world(_threshold, 2):
        assert out == {
            "below": _s(1, 0, 1),
            "above": _s(1, 0, 0),
            "unknown": _s(1, 0, 0),
            "below, lower threshold": _s(1, 0, 0),
        }


def _env_policy(rank: int, world: int) -> dict:
    """The policy install() picks from the environment, and that the argument wins."""
    os.environ[comm_guard.ENV_VAR] = "whitelist"
    from_env = comm_guard.install(probe=CountingProbe(64 * GIB))
    comm_guard.reset_stats()
    dist.barrier()
    dist.all_reduce(torch.ones(2))
    env_stats = comm_guard.stats()
    from_arg = comm_guard.install("off")
    return {"from_env": from_env, "env_stats": env_stats, "from_arg": from_arg}


def test_environment_variable_sets_policy_and_argument_wins():
    for out in run_world(_env_policy, 2):
        assert out["from_env"] == "whitelist"
        assert out["env_stats"] == {"barrier": _s(0, 1), "all_reduce": _s(1, 0)}
        assert out["from_arg"] == "off"
