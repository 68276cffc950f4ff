"""slime's memory check before collectives under the integration: real gloo ranks, slime's real torch.distributed patch.

Each run is two processes applying slime's `monkey_patch_torch_dist()`, then (except for the
`slime` baseline) installing the integration, as slime's spec does in a Megatron actor, and
running one workload (slime_comm_worker.py). What is compared is how many memory probes each
step ran: slime's own `available_memory()` calls against the integration's probe calls.
"""

from __future__ import annotations

import pytest

from .slime_processes import require_slime_comm_dependencies, run_gloo_pair

pytestmark = [pytest.mark.slime, pytest.mark.distributed, pytest.mark.slow]

# Steps that run a call slime wraps and skips (its 8-op list) or does not wrap at all.
SLIME_SKIPS = {"all_gather_into_tensor", "barrier", "isend irecv"}
SLIME_UNWRAPPED = {"P2POp batch"}


@pytest.fixture(scope="module")
def baseline(slime_source):
    require_slime_comm_dependencies()
    return run_gloo_pair("slime", slime_source)


def _steps(result: dict) -> dict[str, int]:
    return result["per_step"]


def test_whitelist_probes_exactly_where_slime_probes(slime_source, baseline):
    runs = run_gloo_pair("whitelist", slime_source)
    for slime_rank, ours in zip(baseline, runs, strict=True):
        assert _steps(ours) == _steps(slime_rank)
        assert ours["counts"]["available_memory"] == 0  # the probe reads free bytes only
        assert ours["call_site_checks"]["checked"] == sum(_steps(slime_rank).values())
        assert ours["guard_stats"] == {}  # slime's call sites decide; no guard wrappers


def test_slime_probes_unnamed_ops_every_call(baseline):
    """What the integration changes, on slime's own code: every unnamed op probes on every call."""
    steps = _steps(baseline[0])
    for label in ("all_reduce", "all_reduce again", "broadcast group again", "group method allreduce again"):
        assert steps[label] == 1, label
    assert steps["coalescing manager again"] == 2  # the manager itself, and the all_reduce inside it
    assert all(steps[label] == 0 for label in steps if label.removesuffix(" again") in SLIME_SKIPS | SLIME_UNWRAPPED)


def test_first_use_probes_each_op_and_group_once_and_again_after_a_reload(slime_source, baseline):
    runs = run_gloo_pair("first-use", slime_source)
    for ours in runs:
        steps = _steps(ours)
        again = {label: n for label, n in steps.items() if label.endswith(" again")}
        assert set(again.values()) == {0}, again  # steady state: no probe
        for label in ("all_reduce", "all_reduce group positional", "broadcast group", "all_gather", "barrier"):
            assert steps[label] == 1, label  # skip-listed ops too: a first use may build a communicator
        # The group passed by position is keyed as the group: its keyword call right after is the same key.
        assert steps["all_reduce group"] == 0
        assert steps["isend irecv"] == 2  # one (op, peer) key each
        assert steps["P2POp batch"] == 1  # P2POp built from the guarded isend/irecv works, and is guarded
        assert steps["coalescing manager"] == 0  # its all_reduce on that group was seen already
        assert steps["group method allreduce"] == 1  # a direct ReloadableProcessGroup call, first time
        assert steps["all_reduce group after reload"] == 1
        assert steps["group method allreduce after reload"] == 1
        assert ours["counts"]["available_memory"] == 0
        assert ours["guard_stats"]["all_reduce"]["skipped"] > 0
    assert sum(_steps(runs[0]).values()) < sum(_steps(baseline[0]).values())


def test_always_probes_every_call_slime_wraps_skip_list_included(slime_source, baseline):
    runs = run_gloo_pair("always", slime_source)
    steps, slime_steps = _steps(runs[0]), _steps(baseline[0])
    for label, n in steps.items():
        if label.removesuffix(" again") in SLIME_SKIPS:
            assert n >= 1, label
        elif label.removesuffix(" again") in SLIME_UNWRAPPED:
            assert n == 0, label  # slime does not wrap batch_isend_irecv: no call site to probe at
        else:
            assert n == slime_steps[label], label
    assert runs[0]["counts"]["available_memory"] == 0


def test_off_probes_nothing(slime_source, baseline):
    runs = run_gloo_pair("off", slime_source)
    assert set(_steps(runs[0]).values()) == {0}
    assert runs[0]["counts"] == {"available_memory": 0, "clear_memory": 0, "probe": 0}


@pytest.mark.parametrize("mode", ["whitelist", "first-use"])
def test_low_free_memory_clears_as_slime_does(slime_source, mode):
    runs = run_gloo_pair(mode, slime_source, free_bytes=1024**3)  # 1 GiB free: under slime's 3 GiB
    ours = runs[0]
    if mode == "whitelist":
        assert ours["counts"]["clear_memory"] == ours["counts"]["probe"] > 0  # slime's clear_memory, each probe
    else:
        guard_cleared = sum(op["cleared"] for op in ours["guard_stats"].values())
        guard_checked = sum(op["checked"] for op in ours["guard_stats"].values())
        assert guard_cleared == guard_checked > 0
        assert ours["counts"]["clear_memory"] == ours["call_site_checks"]["cleared"] == 2  # the direct group calls
