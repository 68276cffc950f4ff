"""Run a function on N real gloo processes with a hard deadline, and collect what each rank returns."""

from __future__ import annotations

import multiprocessing as mp
import os
import tempfile
import time
import traceback
from datetime import timedelta

# A healthy run on the 2-core CI machine takes a few seconds; a deadlock must fail, not hang.
DEADLINE_S = 90


def _rank_main(fn, rank, world_size, store_path, queue, kwargs, backend="gloo"):
    """Init the backend, run fn(rank, world_size, **kwargs), send its result (or traceback) to the parent."""
    import torch
    import torch.distributed as dist

    try:
        if backend == "nccl":
            torch.cuda.set_device(rank)
        dist.init_process_group(
            backend,
            init_method=f"file://{store_path}",
            rank=rank,
            world_size=world_size,
            timeout=timedelta(seconds=60),
        )
        result = fn(rank, world_size, **kwargs)
        dist.barrier()
        dist.destroy_process_group()
        queue.put((rank, "ok", result))
    except BaseException:
        queue.put((rank, "error", traceback.format_exc()))


def run_world(fn, world_size: int, start_method="fork", deadline_s=DEADLINE_S, backend="gloo", **kwargs):
    """Return [result of rank 0, ..., rank N-1]; raise AssertionError on any rank's error or the deadline."""
    ctx = mp.get_context(start_method)
    queue = ctx.Queue()
    fd, store_path = tempfile.mkstemp(prefix="comm_guard_store_")
    os.close(fd)
    os.unlink(store_path)  # FileStore wants to create the file itself
    procs = [
        ctx.Process(target=_rank_main, args=(fn, r, world_size, store_path, queue, kwargs, backend), daemon=True)
        for r in range(world_size)
    ]
    for p in procs:
        p.start()
    results, errors = {}, []
    end = time.monotonic() + deadline_s
    try:
        for _ in range(world_size):
            try:
                rank, status, payload = queue.get(timeout=max(0.1, end - time.monotonic()))
            except Exception as exc:
                raise AssertionError(
                    f"{world_size}-rank run passed its {deadline_s} s deadline; got ranks {sorted(results)}"
                ) from exc
            if status == "ok":
                results[rank] = payload
            else:
                errors.append(f"rank {rank}:\n{payload}")
                break
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
                p.join()
        if os.path.exists(store_path):
            os.unlink(store_path)
    assert not errors, "\n".join(errors)
    return [results[r] for r in range(world_size)]
