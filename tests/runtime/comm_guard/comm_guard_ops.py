"""One call of every wrapped torch.distributed op on real gloo ranks, returning comparable results."""

from __future__ import annotations

import warnings

import torch
import torch.distributed as dist


def _t(rank: int, n: int = 4, scale: int = 1) -> torch.Tensor:
    """A rank-dependent float tensor, so a wrong reduction or gather shows."""
    return torch.arange(n, dtype=torch.float32) * scale + 100 * rank


def _p2p_peers(rank: int, world: int) -> tuple[int, int]:
    """Ring neighbours: send to the next rank, receive from the previous one."""
    return (rank + 1) % world, (rank - 1) % world


def _exchange(rank, world, send_fn, recv_fn, make_send, make_recv):
    """Run a blocking p2p ring step without deadlock: even ranks send first, odd ranks receive first."""
    dst, src = _p2p_peers(rank, world)
    out = make_recv()
    errors = []

    def attempt(fn, *args):
        # A receive can fail after its data arrived (recv_object_list without numpy):
        # still send, so the peer is not left waiting and the ranks stay in step.
        try:
            fn(*args)
        except Exception as exc:
            errors.append(exc)

    if rank % 2 == 0:
        attempt(send_fn, make_send(), dst)
        attempt(recv_fn, out, src)
    else:
        attempt(recv_fn, out, src)
        attempt(send_fn, make_send(), dst)
    if errors:
        raise errors[0]
    return out


def op_calls(rank: int, world: int) -> dict:
    """Map each module-level op name to a zero-argument function that runs it once and returns its output."""
    # Looked up through `dist.<name>` at call time, so the same code runs the
    # original function or the guard's wrapper, whichever is installed.
    calls = {}

    def all_reduce():
        t = _t(rank)
        dist.all_reduce(t)
        return t

    def all_reduce_coalesced():
        ts = [_t(rank), _t(rank, 3, 2)]
        dist.all_reduce_coalesced(ts)
        return ts

    def all_gather():
        out = [torch.empty(4) for _ in range(world)]
        dist.all_gather(out, _t(rank))
        return out

    def all_gather_coalesced():
        out = [[torch.empty(4), torch.empty(3)] for _ in range(world)]
        dist.all_gather_coalesced(out, [_t(rank), _t(rank, 3, 2)])
        return out

    def all_gather_into_tensor():
        out = torch.empty(4 * world)
        dist.all_gather_into_tensor(out, _t(rank))
        return out

    def _all_gather_base():
        out = torch.empty(4 * world)
        dist._all_gather_base(out, _t(rank))
        return out

    def all_gather_object():
        out = [None] * world
        dist.all_gather_object(out, {"rank": rank, "sq": rank * rank})
        return out

    def all_to_all():
        out = [torch.empty(2) for _ in range(world)]
        dist.all_to_all(out, [torch.full((2,), 10.0 * rank + j) for j in range(world)])
        return out

    def all_to_all_single():
        out = torch.empty(2 * world)
        dist.all_to_all_single(out, torch.arange(2 * world, dtype=torch.float32) + 100 * rank)
        return out

    def broadcast():
        t = _t(rank)
        dist.broadcast(t, src=world - 1)
        return t

    def broadcast_object_list():
        objs = [{"from": rank}, rank]
        dist.broadcast_object_list(objs, src=0)
        return objs

    def reduce():
        t = _t(rank)
        dist.reduce(t, dst=0)
        return t if rank == 0 else None

    def reduce_scatter():
        out = torch.empty(3)
        dist.reduce_scatter(out, [_t(rank, 3, j + 1) for j in range(world)])
        return out

    def reduce_scatter_tensor():
        out = torch.empty(2)
        dist.reduce_scatter_tensor(out, torch.arange(2 * world, dtype=torch.float32) + rank)
        return out

    def _reduce_scatter_base():
        out = torch.empty(2)
        dist._reduce_scatter_base(out, torch.arange(2 * world, dtype=torch.float32) + rank)
        return out

    def scatter():
        out = torch.empty(4)
        dist.scatter(out, [_t(j, 4, 3) for j in range(world)] if rank == 0 else None, src=0)
        return out

    def scatter_object_list():
        out = [None]
        dist.scatter_object_list(out, [{"to": j} for j in range(world)] if rank == 0 else None, src=0)
        return out

    def gather():
        out = [torch.empty(4) for _ in range(world)] if rank == 0 else None
        dist.gather(_t(rank), out, dst=0)
        return out

    def gather_object():
        out = [None] * world if rank == 0 else None
        dist.gather_object({"rank": rank}, out, dst=0)
        return out

    def barrier():
        dist.barrier()
        return "passed"

    def monitored_barrier():
        dist.monitored_barrier()
        return "passed"

    def send_recv():
        return _exchange(rank, world, dist.send, dist.recv, lambda: _t(rank), lambda: torch.empty(4))

    def object_send_recv():
        return _exchange(
            rank,
            world,
            dist.send_object_list,
            dist.recv_object_list,
            lambda: [{"from": rank}],
            lambda: [None],
        )

    def isend_irecv():
        dst, src = _p2p_peers(rank, world)
        out = torch.empty(4)
        works = [dist.isend(_t(rank), dst), dist.irecv(out, src)]
        for w in works:
            w.wait()
        return out

    def batch_isend_irecv():
        dst, src = _p2p_peers(rank, world)
        out = torch.empty(4)
        p2p = [dist.P2POp(dist.isend, _t(rank, 4, 5), dst), dist.P2POp(dist.irecv, out, src)]
        for w in dist.batch_isend_irecv(p2p):
            w.wait()
        return out

    for fn in (
        all_reduce,
        all_reduce_coalesced,
        all_gather,
        all_gather_coalesced,
        all_gather_into_tensor,
        _all_gather_base,
        all_gather_object,
        all_to_all,
        all_to_all_single,
        broadcast,
        broadcast_object_list,
        reduce,
        reduce_scatter,
        reduce_scatter_tensor,
        _reduce_scatter_base,
        scatter,
        scatter_object_list,
        gather,
        gather_object,
        barrier,
        monitored_barrier,
        isend_irecv,
        batch_isend_irecv,
    ):
        calls[fn.__name__] = fn
    calls["send+recv"] = send_recv
    calls["send_object_list+recv_object_list"] = object_send_recv
    return calls


def comparable(value):
    """Turn an op's output into plain Python values that compare exactly."""
    if isinstance(value, torch.Tensor):
        return ("tensor", str(value.dtype), value.tolist())
    if isinstance(value, list | tuple):
        return [comparable(v) for v in value]
    return value


def run_op(fn):
    """Run one op; return ("ok", output) or ("raised", exception type, whether the guard noted it, message)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # deprecated ops still work and are still wrapped
            return ("ok", comparable(fn()))
    except Exception as exc:
        noted = any("slime_flashqla.comm_guard" in n for n in getattr(exc, "__notes__", ()))
        return ("raised", type(exc).__name__, noted, str(exc).splitlines()[0] if str(exc) else "")


def pg_method_calls(rank: int, world: int) -> dict:
    """Map ProcessGroup method names to functions calling them directly on the default group."""

    def group():
        return dist.distributed_c10d._get_default_group()

    def allreduce():
        t = _t(rank)
        group().allreduce([t]).wait()
        return t

    def allgather():
        out = [[torch.empty(4) for _ in range(world)]]
        group().allgather(out, [_t(rank)]).wait()
        return out

    def _allgather_base():
        out = torch.empty(4 * world)
        group()._allgather_base(out, _t(rank)).wait()
        return out

    def _reduce_scatter_base():
        out = torch.empty(2)
        group()._reduce_scatter_base(out, torch.arange(2 * world, dtype=torch.float32) + rank).wait()
        return out

    def alltoall_base():
        out = torch.empty(2 * world)
        group().alltoall_base(out, torch.arange(2 * world, dtype=torch.float32) + 100 * rank, [], []).wait()
        return out

    def broadcast():
        t = _t(rank)
        group().broadcast([t]).wait()  # root 0 by default
        return t

    def barrier():
        group().barrier().wait()
        return "passed"

    def send_recv():
        def send(t, peer):
            group().send([t], peer, 0).wait()

        def recv(t, peer):
            group().recv([t], peer, 0).wait()

        return _exchange(rank, world, send, recv, lambda: _t(rank), lambda: torch.empty(4))

    calls = {
        fn.__name__: fn
        for fn in (
            allreduce,
            allgather,
            _allgather_base,
            _reduce_scatter_base,
            alltoall_base,
            broadcast,
            barrier,
        )
    }
    calls["send+recv"] = send_recv
    return calls
