"""A failing collective keeps its type and gains a memory note; a failing probe never breaks a collective."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.distributed as dist
from comm_guard_harness import run_world

from slime_flashqla import comm_guard

pytestmark = pytest.mark.distributed


def _failures(rank: int, world: int) -> dict:
    """Make collectives fail locally (bad root rank, bad output size), unwrapped and guarded."""

    def bad_broadcast():
        dist.broadcast(torch.ones(2), src=world + 3)

    def bad_all_gather():
        dist.all_gather_into_tensor(torch.empty(3), torch.ones(4))

    def bad_pg_broadcast():
        dist.distributed_c10d._get_default_group().broadcast([torch.ones(2)], world + 3).wait()

    def outcome(fn):
        try:
            fn()
        except Exception as exc:
            return type(exc), str(exc), list(getattr(exc, "__notes__", []))
        return None

    out = {}
    for name, fn in (("broadcast", bad_broadcast), ("all_gather", bad_all_gather), ("pg", bad_pg_broadcast)):
        plain = outcome(fn)
        comm_guard.install("always", probe=lambda: None, methods=True)
        guarded = outcome(fn)
        comm_guard.uninstall()
        out[name] = (plain, guarded)
        dist.barrier()
    return out


def test_failing_collective_is_reraised_with_its_type_and_one_memory_note():
    for out in run_world(_failures, 2):
        for name, (plain, guarded) in out.items():
            assert plain is not None, f"{name} did not fail unwrapped: the test lost its failure"
            assert guarded is not None, f"{name}: the guard swallowed the error"
            assert guarded[0] is plain[0], name
            assert guarded[1] == plain[1], name
            notes = guarded[2][len(plain[2]) :]
            assert len(notes) == 1, f"{name}: expected exactly one guard note, got {notes}"
            note = notes[0]
            assert note.startswith("slime_flashqla.comm_guard: torch.distributed "), note
            assert "GPU memory unknown (CUDA not initialized in this process)" in note
            assert " GiB available of " in note
            assert "policy always, threshold 3.00 GiB" in note
        assert "broadcast raised" in out["broadcast"][1][2][-1]
        assert "all_gather_into_tensor raised" in out["all_gather"][1][2][-1]


def _probe_errors(rank: int, world: int) -> dict:
    """A probe that raises: the collective still runs and returns the right result, with one warning."""

    def broken_probe():
        raise OSError("device went away")

    comm_guard.install("always", probe=broken_probe)
    results = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            t = torch.full((2,), float(rank + 1))
            dist.all_reduce(t)
            results.append(t.tolist())
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    return {"results": results, "warnings": messages, "stats": comm_guard.stats()}


def test_failing_probe_never_breaks_the_collective():
    for out in run_world(_probe_errors, 2):
        assert out["results"] == [[3.0, 3.0]] * 3
        assert len(out["warnings"]) == 1
        assert "memory probe failed (OSError: device went away)" in out["warnings"][0]
        assert out["stats"] == {"all_reduce": {"checked": 3, "skipped": 0, "cleared": 0}}
