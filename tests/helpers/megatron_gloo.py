"""Megatron's `mpu` and sequence-parallel mappings, as slime's modules call them, backed by real gloo groups.

Megatron does not install on the CPU test machines (and its tensor_parallel mappings allocate on
CUDA), so slime's modules get the integration's stand-in `megatron.core` (source.py). For
distributed tests these names are pointed at real torch.distributed groups laid out as Megatron
lays them out (rank = tp_rank + TP * (cp_rank + CP * dp_rank)), and the two sequence-parallel
mappings slime's wrapper uses get Megatron's semantics: gather along dim 0 with a backward that
reduce-scatters (tensor_parallel_output_grad=True) or splits, and scatter with an all-gather backward.
"""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist


def _gather(x, group):
    size = dist.get_world_size(group)
    out = x.new_empty((size * x.shape[0], *x.shape[1:]))
    dist.all_gather_into_tensor(out, x.contiguous(), group=group)
    return out


def _split(x, group):
    return x.chunk(dist.get_world_size(group), dim=0)[dist.get_rank(group)].contiguous()


class _GatherFromSequenceParallel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group, output_grad):
        ctx.group, ctx.output_grad = group, output_grad
        return _gather(x, group)

    @staticmethod
    def backward(ctx, grad):
        if not ctx.output_grad:
            return _split(grad, ctx.group), None, None
        size = dist.get_world_size(ctx.group)
        out = grad.new_empty((grad.shape[0] // size, *grad.shape[1:]))
        dist.reduce_scatter_tensor(out, grad.contiguous(), group=ctx.group)
        return out, None, None


class _ScatterToSequenceParallel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return _split(x, group)

    @staticmethod
    def backward(ctx, grad):
        return _gather(grad, ctx.group), None


def megatron_on_gloo(tp: int, cp: int) -> dict[str, object]:
    """Create Megatron's TP and CP groups over the world (a collective) and bind slime's `mpu` names to them."""
    world, rank = dist.get_world_size(), dist.get_rank()
    if world % (tp * cp):
        raise ValueError(f"TP x CP = {tp} x {cp} does not divide the world of {world}")
    core = sys.modules["megatron.core"]
    if getattr(core, "__doc__", "") != "stand-in: Megatron is not installed":
        raise RuntimeError("megatron.core is the real one here: these tests back only the stand-in with gloo")
    tp_rank, cp_rank, dp_rank = rank % tp, (rank // tp) % cp, rank // (tp * cp)
    mine = {}
    for d in range(world // (tp * cp)):
        for c in range(cp):
            group = dist.new_group([t + tp * (c + cp * d) for t in range(tp)])
            if (c, d) == (cp_rank, dp_rank):
                mine["tp"] = group
        for t in range(tp):
            group = dist.new_group([t + tp * (c + cp * d) for c in range(cp)])
            if (t, d) == (tp_rank, dp_rank):
                mine["cp"] = group
    mpu, tensor_parallel = core.mpu, core.tensor_parallel
    mpu.get_tensor_model_parallel_world_size = lambda: tp
    mpu.get_tensor_model_parallel_rank = lambda: tp_rank
    mpu.get_tensor_model_parallel_group = lambda *a, **k: mine["tp"]
    mpu.get_context_parallel_world_size = lambda: cp
    mpu.get_context_parallel_rank = lambda: cp_rank
    mpu.get_context_parallel_group = lambda *a, **k: mine["cp"]
    tensor_parallel.gather_from_sequence_parallel_region = lambda x, tensor_parallel_output_grad=True, group=None: (
        _GatherFromSequenceParallel.apply(x, group or mine["tp"], tensor_parallel_output_grad)
    )
    tensor_parallel.scatter_to_sequence_parallel_region = lambda x, group=None: _ScatterToSequenceParallel.apply(
        x, group or mine["tp"]
    )
    return {"tp_rank": tp_rank, "cp_rank": cp_rank, "tp_group": mine["tp"], "cp_group": mine["cp"]}
