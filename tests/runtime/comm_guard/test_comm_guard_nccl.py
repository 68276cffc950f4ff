"""The guard on 2 GPUs with NCCL: the default probe reads free memory, clearing runs, notes name the GPU."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from comm_guard_harness import run_world

from slime_flashqla import comm_guard

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.distributed,
    pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs"),
]


def _nccl_guard(rank: int, world: int) -> dict:
    """Default probe under each relevant policy on real NCCL collectives."""
    out = {}
    t = torch.ones(1024, device="cuda")  # 4 KiB, and CUDA is initialized from here on
    free, total = torch.cuda.mem_get_info()
    out["probe"] = comm_guard.probe()
    out["free_total"] = (free, total)

    comm_guard.install("first-use")
    for _ in range(10):
        dist.all_reduce(t)
    torch.cuda.synchronize()
    out["first-use"] = comm_guard.stats()["all_reduce"]
    out["sum"] = t[0].item()

    comm_guard.install("always", threshold_gb=1e6)  # more than any GPU has: every probe clears
    comm_guard.reset_stats()
    dist.broadcast(t, src=0)
    out["always, huge threshold"] = comm_guard.stats()["broadcast"]

    out["note"] = None
    try:
        # ProcessGroupNCCL rejects the output size before any NCCL call, so the communicator stays usable
        dist.all_gather_into_tensor(torch.empty(3, device="cuda"), t)
    except Exception as exc:
        out["note"] = exc.__notes__[-1]
    comm_guard.uninstall()
    return out


def test_nccl_guard_with_the_default_probe():
    for rank, out in enumerate(run_world(_nccl_guard, 2, start_method="spawn", backend="nccl")):
        free, total = out["free_total"]
        assert 0 < out["probe"] <= total
        # one probe, at the first call; it clears only if the GPU had under 3 GiB free
        assert out["first-use"] == {"checked": 1, "skipped": 9, "cleared": int(free < 3 * 1024**3)}
        assert out["sum"] == 2.0**10  # ten all_reduces of ones over 2 ranks
        assert out["always, huge threshold"] == {"checked": 1, "skipped": 0, "cleared": 1}
        assert out["note"] is not None, "the mis-sized all_gather_into_tensor did not raise"
        assert f"GPU cuda:{rank} " in out["note"]
        assert " GiB free of " in out["note"]
