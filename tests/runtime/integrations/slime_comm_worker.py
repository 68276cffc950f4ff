"""One gloo rank running slime's real torch.distributed patch, with or without the integration; prints one JSON line.

    python slime_comm_worker.py MODE RANK WORLD_SIZE STORE_PATH [FREE_BYTES]

MODE is `slime` (slime alone) or a comm guard policy (the integration installed after slime's
`monkey_patch_torch_dist()`, as slime's spec runs in a Megatron actor). Every step of the
workload records how many memory probes it ran: slime's `available_memory()` calls, or the
integration's probe calls. slime's `available_memory()` and `clear_memory()` need an
accelerator, so here they are counting stand-ins; everything else is slime's own code.
"""

from __future__ import annotations

import json
import sys
from datetime import timedelta

import torch
import torch.distributed as dist


def main(mode: str, rank: int, world: int, store: str, free_bytes: int) -> dict:
    from slime_flashqla.integrations.slime import install, slime_source
    from slime_flashqla.integrations.slime.source import import_slime_module

    rpg = import_slime_module("slime.utils.reloadable_process_group")
    distributed_utils = import_slime_module("slime.utils.distributed_utils")
    counts = {"available_memory": 0, "clear_memory": 0, "probe": 0}

    def available_memory():
        counts["available_memory"] += 1
        return {"free_GB": free_bytes / 1024**3}

    def clear_memory(clear_host_memory: bool = False):
        counts["clear_memory"] += 1

    def probe():
        counts["probe"] += 1
        return free_bytes

    rpg.available_memory, rpg.clear_memory = available_memory, clear_memory
    timeout = timedelta(seconds=60)
    rpg.monkey_patch_torch_dist()
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world, timeout=timeout)
    distributed_utils.init_gloo_group()
    rpg.register_default_process_group(timeout=timeout)
    group = dist.new_group(list(range(world)))
    installation = None
    if mode != "slime":
        installation = install(policy=mode, probe=probe)

    peer = 1 - rank
    t = torch.ones(4)

    def p2p_ops():
        ops = [dist.P2POp(dist.isend, t, peer, group), dist.P2POp(dist.irecv, torch.empty(4), peer, group)]
        for work in dist.batch_isend_irecv(ops):
            work.wait()

    def isend_irecv():
        works = [dist.isend(t, peer), dist.irecv(torch.empty(4), peer)]
        for work in works:
            work.wait()

    def coalesced():
        with dist._coalescing_manager(group):
            dist.all_reduce(t, group=group)

    def reload_groups():
        rpg.destroy_process_groups()
        rpg.reload_process_groups()

    steps = [
        ("all_reduce", lambda: dist.all_reduce(t)),
        ("all_reduce again", lambda: dist.all_reduce(t)),
        ("all_reduce group positional", lambda: dist.all_reduce(t, dist.ReduceOp.SUM, group)),
        ("all_reduce group", lambda: dist.all_reduce(t, group=group)),
        ("broadcast group", lambda: dist.broadcast(t, 0, group=group)),
        ("broadcast group again", lambda: dist.broadcast(t, 0, group=group)),
        ("all_gather", lambda: dist.all_gather([torch.empty(4) for _ in range(world)], t)),
        ("all_gather_into_tensor", lambda: dist.all_gather_into_tensor(torch.empty(4 * world), t)),
        ("all_gather_into_tensor again", lambda: dist.all_gather_into_tensor(torch.empty(4 * world), t)),
        ("barrier", lambda: dist.barrier()),
        ("barrier again", lambda: dist.barrier()),
        ("coalescing manager", coalesced),
        ("coalescing manager again", coalesced),
        ("group method allreduce", lambda: group.allreduce([t]).wait()),
        ("group method allreduce again", lambda: group.allreduce([t]).wait()),
        ("P2POp batch", p2p_ops),
        ("P2POp batch again", p2p_ops),
        ("isend irecv", isend_irecv),
        ("isend irecv again", isend_irecv),
        ("destroy and reload groups", reload_groups),
        ("all_reduce group after reload", lambda: dist.all_reduce(t, group=group)),
        ("all_reduce group after reload again", lambda: dist.all_reduce(t, group=group)),
        ("group method allreduce after reload", lambda: group.allreduce([t]).wait()),
    ]
    per_step = {}
    for label, step in steps:
        key = "available_memory" if mode == "slime" else "probe"
        before = counts[key]
        step()
        per_step[label] = counts[key] - before
    result = {
        "mode": mode,
        "per_step": per_step,
        "counts": counts,
        "slime_source": str(slime_source()),
    }
    if installation is not None:
        from slime_flashqla import comm_guard

        result["call_site_checks"] = installation.comm_checks()
        result["guard_stats"] = comm_guard.stats()
        result["replaced"] = installation.replaced()
    dist.barrier()
    dist.destroy_process_group()
    return result


if __name__ == "__main__":
    mode, rank, world, store = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    free = int(sys.argv[5]) if len(sys.argv) > 5 else 100 * 1024**3
    print(json.dumps(main(mode, rank, world, store, free)))
