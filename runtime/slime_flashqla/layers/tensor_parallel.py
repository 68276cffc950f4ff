"""Tensor parallelism for the GDN layers: each rank computes Hk/tp key heads and Hv/tp value heads.

The input projections are column-parallel, split on head boundaries (a rank's rows are whole
heads, in each of the checkpoint's sections), the output projection row-parallel: one
all-reduce of the output per step, or, under sequence parallelism, an all-gather of the input
tokens and a reduce-scatter of the output.

Where the parameters live is a choice:
- sharded (the default): a rank holds only its heads' slices; a layer loads the unsharded
  checkpoint's tensors under their own names (each rank keeps its slices) and
  `full_state_dict()` puts them back together;
- whole (`whole_params=True`, what slime's checkpoints, HF conversion and weight updates expect):
  every rank holds every parameter whole and computes on its heads' slices of it, so each rank's
  gradient covers only its heads. They are summed over the group either in the backward
  (`grads_summed_by="backward"`) or by Megatron's own step for parameters marked
  `sequence_parallel` (`"megatron"`: its finalize_model_grads all-reduces those over TP under
  sequence parallelism, once per optimizer step instead of once per micro-batch).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch


@dataclass(frozen=True)
class ShardRule:
    """How a parameter's unsharded tensor splits: along `dim`, each of `sections` cut evenly over the ranks."""

    dim: int
    sections: tuple[int, ...]

    def local(self, full: torch.Tensor, rank: int, size: int) -> torch.Tensor:
        """This rank's slices of every section, concatenated."""
        parts = torch.split(full, list(self.sections), dim=self.dim)
        return torch.cat([part.chunk(size, dim=self.dim)[rank] for part in parts], dim=self.dim)

    def full(self, shards: list[torch.Tensor]) -> torch.Tensor:
        """The unsharded tensor from every rank's local tensor, in rank order."""
        size = len(shards)
        local_sections = [n // size for n in self.sections]
        per_rank = [torch.split(shard, local_sections, dim=self.dim) for shard in shards]
        sections = [torch.cat([parts[i] for parts in per_rank], dim=self.dim) for i in range(len(self.sections))]
        return torch.cat(sections, dim=self.dim)


class _CopyToGroup(torch.autograd.Function):
    """Identity forward; the input gradient is summed over the group (column-parallel input)."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x

    @staticmethod
    def backward(ctx, grad):
        import torch.distributed as dist

        grad = grad.contiguous()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class _ReduceFromGroup(torch.autograd.Function):
    """Sum over the group forward (row-parallel output); identity backward."""

    @staticmethod
    def forward(ctx, x, group):
        import torch.distributed as dist

        x = x.contiguous()
        dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class _GatherTokens(torch.autograd.Function):
    """All-gather along the token dim (sequence parallelism's entry); reduce-scatter backward."""

    @staticmethod
    def forward(ctx, x, group, size):
        ctx.group, ctx.size = group, size
        return _gather_tokens(x, group, size)

    @staticmethod
    def backward(ctx, grad):
        return _reduce_scatter_tokens(grad, ctx.group, ctx.size), None, None


class _ScatterTokens(torch.autograd.Function):
    """Sum over the group and keep this rank's token slice (sequence parallelism's exit); all-gather backward."""

    @staticmethod
    def forward(ctx, x, group, size):
        ctx.group, ctx.size = group, size
        return _reduce_scatter_tokens(x, group, size)

    @staticmethod
    def backward(ctx, grad):
        return _gather_tokens(grad, ctx.group, ctx.size), None, None


def _gather_tokens(x: torch.Tensor, group, size: int) -> torch.Tensor:
    import torch.distributed as dist

    # Collectives stack along dim 0: [size * B, T, H], one B block per rank.
    out = x.new_empty((size * x.shape[0], *x.shape[1:]))
    dist.all_gather_into_tensor(out, x.contiguous(), group=group)
    return torch.cat(out.chunk(size, dim=0), dim=1)


def _reduce_scatter_tokens(x: torch.Tensor, group, size: int) -> torch.Tensor:
    import torch.distributed as dist

    chunks = torch.cat(x.chunk(size, dim=1), dim=0).contiguous()
    out = x.new_empty((x.shape[0], x.shape[1] // size, *x.shape[2:]))
    dist.reduce_scatter_tensor(out, chunks, group=group)
    return out


GRADS_SUMMED_BY = ("backward", "megatron")


def check_same_layer(group, facts: str) -> None:
    """Refuse, on every rank, a group whose ranks built different layers (a collective over `group`).

    Their partial results would otherwise be summed and exchanged as if they matched.
    """
    import torch.distributed as dist

    seen: list = [None] * dist.get_world_size(group)
    dist.all_gather_object(seen, facts, group=group)
    if len(set(seen)) > 1:
        ranks = "; ".join(f"rank {rank}: {fact}" for rank, fact in enumerate(seen))
        raise ValueError(f"the ranks of this GDN layer's parallel group built different layers: {ranks}")


@dataclass(frozen=True)
class TensorParallel:
    """A layer's tensor-parallel group (size 1: none), sequence parallelism, and where its parameters live."""

    group: object = None
    rank: int = 0
    size: int = 1
    sequence_parallel: bool = False
    whole_params: bool = False
    grads_summed_by: str = "backward"

    @classmethod
    def of(
        cls, group, sequence_parallel: bool = False, whole_params: bool = False, grads_summed_by: str = "backward"
    ) -> TensorParallel:
        """The layer's parallel setting from a process group (None: one rank)."""
        if grads_summed_by not in GRADS_SUMMED_BY:
            raise ValueError(f"grads_summed_by must be one of {', '.join(GRADS_SUMMED_BY)}, got {grads_summed_by!r}")
        if grads_summed_by == "megatron" and not sequence_parallel:
            # Megatron's finalize_model_grads sums `sequence_parallel` parameters only under SP.
            raise ValueError("grads_summed_by='megatron' needs sequence_parallel: Megatron sums them over TP only then")
        if group is None:
            if sequence_parallel:
                raise ValueError("sequence_parallel needs a tensor-parallel group (tp_group)")
            return cls(whole_params=whole_params)
        import torch.distributed as dist

        rank, size = dist.get_rank(group), dist.get_world_size(group)
        if rank < 0:
            raise ValueError("this rank is not a member of tp_group: build the layer with a group it belongs to")
        return cls(group, rank, size, sequence_parallel, whole_params, grads_summed_by)

    def param_config(self, cfg):
        """The config the parameters are built with: the whole model's, or this rank's heads when sharded."""
        return cfg if self.whole_params else self.local_config(cfg)

    def share(self, param: torch.Tensor, rule: ShardRule) -> torch.Tensor:
        """The slices of a parameter this rank computes with (the parameter itself where it is sharded)."""
        if not self.whole_params or self.size == 1:
            return param
        return rule.local(self._summed(param), self.rank, self.size)

    def mark_megatron_reduced(self, params) -> None:
        """Tag whole parameters whose gradients Megatron must sum over TP (its `sequence_parallel` attribute)."""
        if self.whole_params and self.size > 1 and self.grads_summed_by == "megatron":
            for param in params:
                param.sequence_parallel = True

    def _summed(self, param: torch.Tensor) -> torch.Tensor:
        """`param`, its gradient summed over the group in the backward unless Megatron sums it later."""
        if self.size == 1 or (self.whole_params and self.grads_summed_by == "megatron"):
            return param
        return _CopyToGroup.apply(param, self.group)

    def local_config(self, cfg):
        """The per-rank layer config: key and value heads divided by the group size."""
        if cfg.num_key_heads % self.size or cfg.num_value_heads % self.size:
            raise ValueError(
                f"tensor parallelism {self.size} must divide the GDN heads "
                f"(linear_num_key_heads={cfg.num_key_heads}, linear_num_value_heads={cfg.num_value_heads})"
            )
        heads = {"num_key_heads": cfg.num_key_heads // self.size, "num_value_heads": cfg.num_value_heads // self.size}
        return replace(cfg, **heads)

    def enter(self, x: torch.Tensor) -> torch.Tensor:
        """The layer's input as every rank's projections need it (whole sequence, gradients summed)."""
        if self.size == 1:
            return x
        if self.sequence_parallel:
            return _GatherTokens.apply(x, self.group, self.size)
        return _CopyToGroup.apply(x, self.group)

    def replicated(self, param: torch.Tensor) -> torch.Tensor:
        """A parameter every rank holds whole but applies to its own heads: its gradient summed over the group."""
        return self._summed(param)

    def leave(self, y: torch.Tensor) -> torch.Tensor:
        """The output projection's partial sums made whole (and split over tokens again under SP)."""
        if self.size == 1:
            return y
        if self.sequence_parallel:
            if y.shape[1] % self.size:
                raise ValueError(f"sequence parallelism {self.size} must divide the tokens, got {y.shape[1]}")
            return _ScatterTokens.apply(y, self.group, self.size)
        return _ReduceFromGroup.apply(y, self.group)

    def shard(self, full: torch.Tensor, rule: ShardRule | None) -> torch.Tensor:
        """This rank's part of an unsharded tensor (the whole tensor where the rule is None: replicated)."""
        return full if rule is None else rule.local(full, self.rank, self.size)

    def gather(self, local: torch.Tensor, rule: ShardRule | None) -> torch.Tensor:
        """The unsharded tensor from every rank's part (a collective: every rank calls it)."""
        if rule is None or self.size == 1:
            return local
        import torch.distributed as dist

        shards = [torch.empty_like(local) for _ in range(self.size)]
        dist.all_gather(shards, local.contiguous(), group=self.group)
        return rule.full(shards)
