"""The guard's public API without processes: skip list, policy choice, argument checks, install/uninstall."""

from __future__ import annotations

import functools
import inspect
import os
import pickle
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch.distributed as dist

from slime_flashqla import comm_guard
from slime_flashqla.comm_guard import ops

SLIME_SKIP_OPS = {
    "all_gather_into_tensor",
    "allgather_into_tensor_coalesced",
    "barrier",
    "broadcast_object_list",
    "reduce_scatter_tensor",
    "all_to_all_single",
    "isend",
    "irecv",
}

ISSUE_OPS = [
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_object",
    "all_to_all",
    "all_to_all_single",
    "broadcast",
    "broadcast_object_list",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "scatter",
    "scatter_object_list",
    "gather",
    "gather_object",
    "barrier",
    "send",
    "recv",
    "send_object_list",
    "recv_object_list",
    "isend",
    "irecv",
    "batch_isend_irecv",
]


def test_skip_ops_is_exactly_slimes_list():
    assert comm_guard.SKIP_OPS == SLIME_SKIP_OPS
    for name in SLIME_SKIP_OPS:
        assert comm_guard.should_check_memory_for_comm(name) is False
    for name in (
        "all_reduce",
        "broadcast",
        "allreduce",
        "_allgather_base",
        "_reduce_scatter_base",
        "alltoall_base",
    ):
        assert comm_guard.should_check_memory_for_comm(name) is True


def test_default_policy_and_environment(monkeypatch):
    assert comm_guard.install() == comm_guard.DEFAULT_POLICY == "first-use"
    monkeypatch.setenv(comm_guard.ENV_VAR, " Always ")
    assert comm_guard.install() == "always"
    assert comm_guard.install("off") == "off"  # the argument wins
    monkeypatch.setenv(comm_guard.ENV_VAR, "")
    assert comm_guard.install() == "first-use"  # empty counts as unset


@pytest.mark.parametrize(("env", "arg"), [("sometimes", None), (None, "first_use"), (None, 3)])
def test_bad_policy_names_the_valid_ones(monkeypatch, env, arg):
    if env is not None:
        monkeypatch.setenv(comm_guard.ENV_VAR, env)
    with pytest.raises(ValueError, match="valid policies: always, whitelist, first-use, off") as info:
        comm_guard.install(arg)
    assert (comm_guard.ENV_VAR if env else "policy argument") in str(info.value)
    assert not comm_guard.is_installed()


@pytest.mark.parametrize("threshold", [-1, float("nan"), float("inf"), "3", True, 1e308, 2**20 + 1])
def test_bad_threshold_is_refused_before_anything_is_patched(threshold):
    """A threshold is checked before anything is patched: a refused one leaves torch as it was (issue 25 D19)."""
    before = _snapshot()
    with pytest.raises(ValueError, match=r"threshold_gb must be a number from 0 to 1048576 \(GiB\)"):
        comm_guard.install(threshold_gb=threshold)
    assert not comm_guard.is_installed() and comm_guard.active_policy() is None
    assert all(_snapshot()[k] is before[k] for k in before)


def test_threshold_bounds_are_accepted():
    assert comm_guard.install(threshold_gb=2**20) == "first-use"
    assert comm_guard.install(threshold_gb=0) == "first-use"
    assert comm_guard.install(threshold_gb=np.float32(2.5)) == "first-use"


def test_guarded_collectives_pickle_to_the_torch_distributed_name():
    """A guarded collective pickles as torch's own name, so it can be shipped to a spawned pool (issue 25 D20)."""
    comm_guard.install()
    payloads = [pickle.dumps(dist.all_reduce), pickle.dumps(functools.partial(dist.broadcast, src=0))]
    assert pickle.loads(payloads[0]) is dist.all_reduce
    assert pickle.loads(payloads[1]).func is dist.broadcast
    for name in ("isend", "new_group", "barrier"):
        assert pickle.loads(pickle.dumps(getattr(dist, name))) is getattr(dist, name)
    # A fresh interpreter, unguarded, gets torch's own function by the same name.
    code = "import pickle, sys, torch.distributed as d; print(pickle.loads(sys.stdin.buffer.read()) is d.all_reduce)"
    done = subprocess.run([sys.executable, "-c", code], input=payloads[0], capture_output=True, timeout=120)
    assert done.stdout == b"True\n", done.stderr


def test_probe_must_be_callable():
    with pytest.raises(TypeError, match="probe must be a callable"):
        comm_guard.install(probe=3)


def test_default_probe_knows_nothing_without_cuda():
    # this suite runs on CPU-only torch (CI) or without CUDA initialized
    assert comm_guard.probe() is None


def _snapshot():
    """The current objects behind every name the guard may replace."""
    snap = {("dist", n): getattr(dist, n) for n in (*ops.MODULE_OPS, *ops.LIFECYCLE_OPS) if hasattr(dist, n)}
    snap.update({("pg", n): dist.ProcessGroup.__dict__[n] for n in ops.PG_METHODS if n in dist.ProcessGroup.__dict__})
    snap.update({("p2pop", n): dist.P2POp.__dict__[n] for n in ("__new__", "__init__")})
    return snap


def test_install_wraps_with_metadata_and_uninstall_restores_the_originals():
    before = _snapshot()
    assert set(ISSUE_OPS) <= {n for kind, n in before if kind == "dist"}
    comm_guard.install()
    assert comm_guard.is_installed()
    for name in ops.MODULE_OPS:
        if not hasattr(dist, name):
            continue
        wrapper, original = getattr(dist, name), before[("dist", name)]
        assert wrapper is not original
        assert wrapper.__wrapped__ is original
        assert (wrapper.__name__, wrapper.__doc__) == (original.__name__, original.__doc__)
        assert wrapper.__module__ == "torch.distributed"  # where pickle finds it (issue 25 D20)
        assert inspect.signature(wrapper) == inspect.signature(original)
    pg_names = [name for name in ops.PG_METHODS if ("pg", name) in before]
    assert pg_names and not comm_guard.methods_guarded()
    assert all(dist.ProcessGroup.__dict__[name] is before[("pg", name)] for name in pg_names)  # opt-in
    comm_guard.install(methods=True)
    assert comm_guard.methods_guarded()
    for name in pg_names:
        assert dist.ProcessGroup.__dict__[name] is not before[("pg", name)]
    first = _snapshot()
    comm_guard.install("always", methods=True)  # a second install re-configures, never wraps twice
    assert _snapshot() == first
    assert comm_guard.active_policy() == "always"
    comm_guard.install("always")  # ...and takes the methods' wrappers off again when not asked for
    assert all(dist.ProcessGroup.__dict__[name] is before[("pg", name)] for name in pg_names)
    comm_guard.install("always", methods=True)
    assert _snapshot() == first  # the same wrapper objects as before, not new ones
    comm_guard.uninstall()
    after = _snapshot()
    assert all(after[k] is before[k] for k in before)
    assert not comm_guard.is_installed()
    assert comm_guard.active_policy() is None
    comm_guard.uninstall()  # harmless when not installed
    assert all(_snapshot()[k] is before[k] for k in before)


def test_uninstall_leaves_a_later_patch_in_place_and_deactivates_the_guard():
    original = dist.all_reduce
    comm_guard.install("always", probe=lambda: 0)
    ours = dist.all_reduce

    def theirs(*args, **kwargs):
        return ours(*args, **kwargs)

    dist.all_reduce = theirs
    try:
        with pytest.warns(RuntimeWarning, match=r"re-patched them after install.*all_reduce"):
            comm_guard.uninstall()
        assert dist.all_reduce is theirs
        assert dist.all_gather is dist.distributed_c10d.all_gather  # the rest went back
        # the wrapper `theirs` still holds now passes straight through: no probe, no count, no note
        with pytest.raises(ValueError, match="Default process group has not been initialized") as info:
            theirs(__import__("torch").ones(1))
        assert not getattr(info.value, "__notes__", None)
        assert comm_guard.stats() == {}
    finally:
        dist.all_reduce = original
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        comm_guard.uninstall()


def _dynamo_view() -> dict:
    """What TorchDynamo reads of the guard: torch's rewrite table and `_torchdynamo_inline` on torch's functions."""
    from torch.distributed._functional_collectives import traceable_collective_remaps

    c10d = dist.distributed_c10d
    return {
        "table": dict(traceable_collective_remaps),
        "inline": {name: vars(getattr(c10d, name)).get("_torchdynamo_inline") for name in ops.MODULE_OPS},
    }


def test_what_dynamo_reads_is_torch_s_own_again_after_uninstall_and_in_a_forked_child():
    """Installed, Dynamo rewrites a wrapper as it rewrites the original; afterwards nothing is left (issue 34 ND1)."""
    before = _dynamo_view()
    comm_guard.install()
    installed = _dynamo_view()
    assert installed["table"][dist.all_reduce] is before["table"][dist.distributed_c10d.all_reduce]
    assert installed["inline"]["all_reduce"] is dist.all_reduce  # torch's own code reaches the original
    assert "_torchdynamo_inline" not in vars(dist.all_reduce)
    assert dist.broadcast._torchdynamo_inline is dist.distributed_c10d.broadcast  # not rewritten: traced as torch's
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.write(write, b"1" if _dynamo_view() == before else b"0")
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read, 1) == b"1"
    comm_guard.uninstall()
    assert _dynamo_view() == before
