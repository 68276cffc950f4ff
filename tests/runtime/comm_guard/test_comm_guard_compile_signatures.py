"""Under the guard, TorchDynamo sees every wrapped collective as it sees it unguarded (issue 34 ND1).

Each step below calls one torch.distributed function the guard wraps, in one of its call forms
(with and without `op`, `group`, `async_op`, by position and by keyword), inside
`torch.compile(fullgraph=True)`, on two gloo ranks: first unguarded, then with the guard
installed, with Dynamo's point-to-point switch off (its default) and on. Dynamo rewrites some of
these calls (`traceable_collective_remaps`: `all_reduce` with its `ReduceOp` turned into a string,
the point-to-point calls behind that switch) and cannot trace the others; either way the outcome
(the values, or the exception's type and first line) and the graph-break count must be the same.
Without `fullgraph`, the values and the graphs compiled must be the same too (guarded, a frame with
a `ReduceOp` call used to run uncompiled, silently); a call Dynamo cannot trace breaks the graph
inside its trampoline for torch's function, which may count one break more.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from comm_guard_harness import run_world
from torch.distributed.distributed_c10d import all_reduce as all_reduce_bound_before_install

from slime_flashqla import comm_guard

pytestmark = [pytest.mark.distributed, pytest.mark.slow]

MAX, SUM, AVG = dist.ReduceOp.MAX, dist.ReduceOp.SUM, dist.ReduceOp.AVG


def _waited(work) -> None:
    if work is not None:
        work.wait()


def steps(rank: int, world: int, group) -> dict:
    """label -> a function of one tensor that calls one wrapped collective and returns a tensor."""
    peer = 1 - rank

    def empty(x, n=1):
        return torch.empty(x.numel() * n)

    def p2p_pair(x):
        ops = [dist.P2POp(dist.isend, x, peer), dist.P2POp(dist.irecv, y := torch.empty_like(x), peer)]
        for work in dist.batch_isend_irecv(ops):
            work.wait()
        return y

    def isend_irecv(x):
        y = torch.empty_like(x)
        works = [dist.isend(x, peer), dist.irecv(y, peer)] if rank == 0 else [dist.irecv(y, peer), dist.isend(x, peer)]
        for work in works:
            work.wait()
        return y

    def send_recv(x):
        if rank == 0:
            dist.send(x, 1)
        else:
            dist.recv(x, 0)
        return x

    def objects(x):
        out = [None] * world
        dist.all_gather_object(out, rank)
        return x + sum(out)

    return {
        "all_reduce": lambda x: (dist.all_reduce(x), x)[1],
        "all_reduce op=MAX": lambda x: (dist.all_reduce(x, op=MAX), x)[1],
        "all_reduce MAX by position": lambda x: (dist.all_reduce(x, MAX), x)[1],
        "all_reduce op=SUM group": lambda x: (dist.all_reduce(x, op=SUM, group=group), x)[1],
        "all_reduce MAX group by position": lambda x: (dist.all_reduce(x, MAX, group), x)[1],
        "all_reduce op=AVG": lambda x: (dist.all_reduce(x, op=AVG), x)[1],
        "all_reduce tensor= op= group=": lambda x: (dist.all_reduce(tensor=x, op=MAX, group=group), x)[1],
        "all_reduce async_op": lambda x: (_waited(dist.all_reduce(x, async_op=True)), x)[1],
        "all_reduce op=MAX async_op": lambda x: (_waited(dist.all_reduce(x, op=MAX, async_op=True)), x)[1],
        "all_reduce bound before install op=MAX": lambda x: (all_reduce_bound_before_install(x, op=MAX), x)[1],
        "all_reduce_coalesced op=MAX": lambda x: (dist.all_reduce_coalesced([x], op=MAX), x)[1],
        "all_gather": lambda x: torch.cat((out := [empty(x) for _ in range(world)], dist.all_gather(out, x))[0]),
        "all_gather group": lambda x: torch.cat(
            (out := [empty(x) for _ in range(world)], dist.all_gather(out, x, group=group))[0]
        ),
        "all_gather_into_tensor": lambda x: (out := empty(x, world), dist.all_gather_into_tensor(out, x))[0],
        "all_gather_into_tensor group": lambda x: (
            out := empty(x, world),
            dist.all_gather_into_tensor(out, x, group),
        )[0],
        "all_gather_into_tensor async_op": lambda x: (
            out := empty(x, world),
            _waited(dist.all_gather_into_tensor(out, x, async_op=True)),
        )[0],
        "_all_gather_base": lambda x: (out := empty(x, world), dist._all_gather_base(out, x))[0],
        "all_gather_object": objects,
        "all_to_all_single": lambda x: (out := torch.empty_like(x), dist.all_to_all_single(out, x))[0],
        "all_to_all_single group": lambda x: (
            out := torch.empty_like(x),
            dist.all_to_all_single(out, x, group=group),
        )[0],
        "all_to_all": lambda x: torch.cat(
            (outs := [empty(x) for _ in range(world)], dist.all_to_all(outs, [x.clone() for _ in range(world)]))[0]
        ),
        "broadcast": lambda x: (dist.broadcast(x, src=0), x)[1],
        "broadcast group async_op": lambda x: (_waited(dist.broadcast(x, 0, group, True)), x)[1],
        "reduce op=MAX": lambda x: (dist.reduce(x, dst=0, op=MAX), x)[1],
        "reduce_scatter_tensor": lambda x: (out := x[:2].clone(), dist.reduce_scatter_tensor(out, x))[0],
        "reduce_scatter_tensor op=MAX": lambda x: (out := x[:2].clone(), dist.reduce_scatter_tensor(out, x, op=MAX))[0],
        "reduce_scatter_tensor MAX group by position": lambda x: (
            out := x[:2].clone(),
            dist.reduce_scatter_tensor(out, x, MAX, group),
        )[0],
        "reduce_scatter_tensor op=AVG async_op": lambda x: (
            out := x[:2].clone(),
            _waited(dist.reduce_scatter_tensor(out, x, op=AVG, async_op=True)),
        )[0],
        "_reduce_scatter_base op=MAX": lambda x: (out := x[:2].clone(), dist._reduce_scatter_base(out, x, op=MAX))[0],
        "reduce_scatter op=MAX": lambda x: (out := x[:2].clone(), dist.reduce_scatter(out, [x[:2], x[2:]], op=MAX))[0],
        "scatter": lambda x: (dist.scatter(x, [x.clone() for _ in range(world)] if rank == 0 else None, src=0), x)[1],
        "gather": lambda x: (dist.gather(x, [empty(x) for _ in range(world)] if rank == 0 else None, dst=0), x)[1],
        "barrier": lambda x: (dist.barrier(), x)[1],
        "barrier group": lambda x: (dist.barrier(group=group), x)[1],
        "monitored_barrier": lambda x: (dist.monitored_barrier(), x)[1],
        "send recv": send_recv,
        "isend irecv": isend_irecv,
        "batch_isend_irecv": p2p_pair,
    }


# Steps also compiled without fullgraph: a frame Dynamo gives up on runs eagerly, and correctly.
PARTIAL = ("all_reduce op=MAX", "all_reduce op=SUM group", "reduce_scatter_tensor op=MAX", "broadcast")


def _outcome(fn, x, fullgraph: bool = True) -> tuple:
    """What one fresh compile and call gave (the values, or the exception's type and line), graph breaks, graphs."""
    torch._dynamo.reset()
    counters = torch._dynamo.utils.counters
    counters.clear()
    try:
        out = ("ok", torch.compile(fn, backend="eager", fullgraph=fullgraph)(x).tolist())
    except Exception as error:
        out = (type(error).__name__, str(error).strip().splitlines()[0] if str(error).strip() else "")
    return out, sum(counters["graph_break"].values()), counters["stats"]["unique_graphs"]


def _each_step(rank: int, world: int) -> dict:
    group = dist.new_group(list(range(world)))
    seen = {}
    # Dynamo's point-to-point switch exists from torch 2.9 on; before it, point-to-point calls are not compiled.
    for p2p in (False, True) if hasattr(torch._dynamo.config, "enable_p2p_compilation") else (False,):
        with torch._dynamo.config.patch(**({"enable_p2p_compilation": p2p} if p2p else {})):
            for guarded in (False, True):
                if guarded:
                    comm_guard.install("first-use")
                for label, fn in steps(rank, world, group).items():
                    seen[label, p2p, guarded] = _outcome(fn, torch.arange(4.0) + rank)
                    dist.barrier()  # a step that failed on one side must not shift the next
                    if label in PARTIAL and not p2p:
                        seen[label, "no fullgraph", guarded] = _outcome(fn, torch.arange(4.0) + rank, False)
                        dist.barrier()
                comm_guard.uninstall()
    return seen


P2P_STEPS = ("send recv", "isend irecv", "batch_isend_irecv")


def _compared(label: str, outcome: tuple) -> tuple:
    """The outcome as compared: before torch 2.9 Dynamo refuses point-to-point calls either way, and its
    reason line names where it stopped tracing (inside the guard's wrapper or not), so there only the
    refusal's type, the graph breaks and the graphs must agree."""
    if label in P2P_STEPS and not hasattr(torch._dynamo.config, "enable_p2p_compilation"):
        (kind, _), breaks, graphs = outcome
        return kind, breaks, graphs
    return outcome


def test_every_wrapped_call_compiles_under_the_guard_as_it_does_unguarded():
    for rank, seen in enumerate(run_world(_each_step, 2, deadline_s=280)):
        differ = {
            (label, p2p): {"unguarded": out, "guarded": seen[label, p2p, True]}
            for (label, p2p, guarded), out in seen.items()
            if not guarded
            and p2p != "no fullgraph"
            and _compared(label, seen[label, p2p, True]) != _compared(label, out)
        }
        assert not differ, (rank, differ)
        # the premise: torch compiles the ReduceOp calls unguarded, in one graph
        for label in ("all_reduce op=MAX", "reduce_scatter_tensor op=MAX", "all_reduce bound before install op=MAX"):
            assert seen[label, False, False][0][0] == "ok" and seen[label, False, False][1:] == (0, 1), label
        for label in PARTIAL:
            (out, breaks, graphs), guarded = seen[label, "no fullgraph", False], seen[label, "no fullgraph", True]
            assert guarded[0] == out and guarded[2] == graphs, (rank, label, out, guarded)
            assert guarded[1] == breaks if graphs else breaks <= guarded[1] <= breaks + 1, (rank, label, guarded)
