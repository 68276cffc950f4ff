"""The guard is transparent to torch.compile (issue 25 D3), on real gloo ranks, under every policy.

Unguarded, Dynamo maps `dist.all_reduce` to a functional collective, so a step calling it compiles
with `fullgraph=True`. Guarded, it traced into the wrapper and failed (or, without fullgraph, broke
the graph at the guard's probe), under every policy, `off` included. Now Dynamo traces torch's own
function in the wrapper's place: what compiles unguarded compiles guarded, what cannot be traced
fails alike, no guard code runs inside a compiled region, and eager calls are still guarded.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from comm_guard_harness import run_world

from slime_flashqla import comm_guard

pytestmark = [pytest.mark.distributed, pytest.mark.slow]


def _all_reduce_step(x):
    dist.all_reduce(x)
    return x * 2


def _broadcast_step(x):
    dist.broadcast(x, src=0)  # Dynamo has no functional form of this one: it breaks the graph, guarded or not
    return x + 1


def _compiled(fn, x, fullgraph: bool):
    """(outcome, graph breaks) of one fresh compile and call: the output, or the exception's type name."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    try:
        out = torch.compile(fn, backend="eager", fullgraph=fullgraph)(x).tolist()
    except Exception as error:
        out = type(error).__name__
    return out, sum(torch._dynamo.utils.counters["graph_break"].values())


def _compile_under_each_policy(rank: int, world: int) -> dict:
    def outcomes():
        return {
            (fn.__name__, fullgraph): _compiled(fn, torch.full((3,), float(rank + 1)), fullgraph)
            for fn in (_all_reduce_step, _broadcast_step)
            for fullgraph in (True, False)
        }

    seen = {"unguarded": outcomes()}
    for policy in comm_guard.POLICIES:
        comm_guard.install(policy, threshold_gb=0)
        comm_guard.reset_stats()
        compiled = _compiled(_all_reduce_step, torch.ones(3), True)
        seen[policy, "counted while compiled"] = (compiled[1], comm_guard.stats())
        seen[policy] = outcomes()
        x = torch.ones(3)
        _all_reduce_step(x)  # eager: through the guard
        seen[policy, "eager"] = (x.tolist(), comm_guard.stats().get("all_reduce"))
        comm_guard.uninstall()
    return seen


def test_compiled_collectives_compile_as_unguarded_and_eager_calls_stay_guarded():
    for rank, seen in enumerate(run_world(_compile_under_each_policy, 2, deadline_s=600)):
        unguarded = seen["unguarded"]
        total = float(sum(range(1, 3)))
        assert unguarded[("_all_reduce_step", True)] == ([2 * total] * 3, 0)  # the premise: torch compiles it
        assert unguarded[("_broadcast_step", True)][0] == "Unsupported"  # ...and cannot trace this one
        for policy in comm_guard.POLICIES:
            guarded = seen[policy]
            assert guarded[("_all_reduce_step", True)] == unguarded[("_all_reduce_step", True)], (rank, policy)
            assert guarded[("_all_reduce_step", False)] == unguarded[("_all_reduce_step", False)], (rank, policy)
            assert guarded[("_broadcast_step", True)] == unguarded[("_broadcast_step", True)], (rank, policy)
            # Untraceable either way: the same result. Dynamo breaks its graph there (inside its own
            # trampoline for the original, so its counter may read one more) and runs that code eagerly.
            assert guarded[("_broadcast_step", False)][0] == unguarded[("_broadcast_step", False)][0]
            # A compiled all_reduce is torch's functional collective: no guard code traced or run.
            assert seen[policy, "counted while compiled"] == (0, {}), (policy, "guard code in a compiled region")
            out, counted = seen[policy, "eager"]
            assert out == [2.0, 2.0, 2.0]
            assert counted is not None and counted["checked"] + counted["skipped"] == 1, (policy, counted)
