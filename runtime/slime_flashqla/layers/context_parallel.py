"""Context parallelism for the GDN layers: head-parallel, by all-to-all between token slices and head groups.

Under context parallelism each rank holds a slice of every sequence's tokens (slime's
per-sequence zigzag: every sequence of the pack is cut into 2 * CP chunks and rank r holds
chunks r and 2 * CP - 1 - r, concatenated sequence by sequence). The recurrence of a GDN layer
runs along whole sequences, so the layer moves the short conv's and the gates' inputs of its
heads from "my tokens, all heads" to "all tokens, my head group" with one all-to-all, runs the
conv, the gates and the kernel on whole sequences for Hk/CP key heads, and moves the kernel's
output back with a second all-to-all. Projections, the gated norm and the output projection run
on the rank's own tokens; the input projections write each head group's columns straight into
the first all-to-all's send buffer (one batched GEMM over the groups). Every kernel backend
works unchanged (it sees ordinary packed sequences), and the backward of each all-to-all is the
other one, so gradients are exact.
"""

from __future__ import annotations

import itertools
import weakref
from dataclasses import dataclass, replace

import torch

from slime_flashqla.layers.tensor_parallel import ShardRule
from slime_flashqla.triton_ops.word_copy import contiguous_words

# Columns per layout group that the gathered rows are padded to a multiple of: the short conv reads
# a group's columns at a runtime stride, and Triton keeps 16-byte vector loads only for an
# integer argument it has specialised as divisible by 16.
GROUP_ALIGN = 16


class ContextParallelError(ValueError):
    """A pack or a layer that context parallelism cannot split: the message says what to change."""


@dataclass(frozen=True)
class ZigzagLayout:
    """Where each token of the whole pack sits among the ranks' zigzag slices, as two index tensors.

    `natural[p]` is the row, in the ranks' slices stacked in rank order ([CP * T_local]), of the
    pack's token p; `zigzag` is its inverse.
    """

    natural: torch.Tensor
    zigzag: torch.Tensor


def check_zigzag_offsets(offsets: list[int], size: int, local_tokens: int) -> None:
    """Refuse packed offsets that slime's CP slicing could not have produced for `local_tokens` per rank."""
    total = offsets[-1]
    if total != local_tokens * size:
        raise ContextParallelError(
            f"GDN context parallelism {size}: cu_seqlens ends at {total} tokens, but {size} ranks holding "
            f"{local_tokens} tokens each make {local_tokens * size}: pass the whole pack's cu_seqlens "
            "(slime's packed_seq_params.cu_seqlens_q), not this rank's"
        )
    for index, (start, end) in enumerate(itertools.pairwise(offsets)):
        if (end - start) % (2 * size):
            raise ContextParallelError(
                f"GDN context parallelism {size}: sequence {index} of the pack has {end - start} tokens, not a "
                f"multiple of 2*CP={2 * size}: slime's get_batch pads each sequence to one (slice_with_cp); "
                "pad the sequences as slime does"
            )


def zigzag_layout(offsets: list[int], size: int, device) -> ZigzagLayout:
    """The index tensors of slime's per-sequence zigzag for packed `offsets` (already checked) over `size` ranks."""
    bounds = torch.tensor(offsets, dtype=torch.int64)
    total = int(bounds[-1])
    local_tokens = total // size
    position = torch.arange(total, dtype=torch.int64)
    sequence = torch.searchsorted(bounds, position, right=True) - 1
    start = bounds[sequence]
    chunk = (bounds[sequence + 1] - start) // (2 * size)
    offset = position - start
    index = offset // chunk.clamp(min=1)
    second = index >= size
    rank = torch.where(second, 2 * size - 1 - index, index)
    local = start // size + offset - index * chunk + torch.where(second, chunk, 0)
    natural = rank * local_tokens + local
    zigzag = torch.empty_like(natural)
    zigzag[natural] = position
    return ZigzagLayout(natural.to(device), zigzag.to(device))


def _all_to_all(x: torch.Tensor, group) -> torch.Tensor:
    import torch.distributed as dist

    x = contiguous_words(x)
    out = torch.empty_like(x)
    dist.all_to_all_single(out, x, group=group)
    return out


def _to_heads(stacked: torch.Tensor, layout: ZigzagLayout, group) -> torch.Tensor:
    """[CP, T_local, X] (block j: this rank's tokens for head group j) -> [T, X]: the whole pack, this rank's group."""
    received = _all_to_all(stacked, group)
    return received.view(-1, received.shape[-1]).index_select(0, layout.natural)


def _to_tokens(whole: torch.Tensor, layout: ZigzagLayout, group, size: int) -> torch.Tensor:
    """[T, X] of this rank's head group -> [CP, T_local, X] (block j: this rank's tokens, head group j)."""
    by_rank = whole.index_select(0, layout.zigzag).view(size, -1, whole.shape[-1])
    return _all_to_all(by_rank, group)


@dataclass(frozen=True)
class ExchangeRows:
    """Rows of a layer's projection weights stacked as [*weights, one zero row], in the order the exchange uses them.

    `sent`: the rows whose outputs travel, CP head groups of layout groups, each layout group's
    columns padded with the zero row to `padded`; `kept`: the rows whose outputs stay on this rank
    (z); `back[r]`: where stacked row r is among sent then kept (0 for the `unused` rows, whose
    gradient is zero); `sizes`: each weight's rows.
    """

    sent: torch.Tensor
    kept: torch.Tensor
    back: torch.Tensor
    unused: torch.Tensor
    padded: int
    sizes: tuple[int, ...]

    def weights(self, weights) -> tuple[torch.Tensor, torch.Tensor]:
        """(the sent rows of `weights` stacked, the kept rows), gathered: copies made per pass, never saved."""
        stacked = torch.cat([*weights, weights[0].new_zeros(1, weights[0].shape[1])])
        return stacked.index_select(0, self.sent), stacked.index_select(0, self.kept)

    def weight_grads(self, grads: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Each weight's gradient from `grads` [len(sent) + len(kept), H] (the sent rows' then the kept rows')."""
        stacked = grads.index_select(0, self.back)
        if self.unused.numel():
            stacked.index_fill_(0, self.unused, 0)
        return stacked[:-1].split(self.sizes)


def exchange_rows(size: int, groups: int, columns, kept: list[int], sizes: tuple[int, ...], device) -> ExchangeRows:
    """The exchange's rows of projection weights of `sizes` rows each, stacked with a zero row after them.

    `columns(j, g)` lists the stacked rows whose outputs head group j's layout group g needs; each
    such row of columns is padded to a multiple of GROUP_ALIGN with the zero row, so the sent
    buffer is [CP, T_local, groups * padded]. `kept` lists the rows whose outputs stay here.
    """
    zero_row = sum(sizes)
    rows = [list(columns(j, g)) for j in range(size) for g in range(groups)]
    width = len(rows[0])
    if any(len(row) != width for row in rows):  # pragma: no cover - every layout group has the same columns
        raise AssertionError("every layout group of the exchange must send the same number of columns")
    padded = width + (-width) % GROUP_ALIGN
    sent = [index for row in rows for index in (*row, *[zero_row] * (padded - width))]
    back = [0] * (zero_row + 1)
    for position, index in enumerate([*sent, *kept]):
        if index != zero_row:
            back[index] = position
    unused = sorted(set(range(zero_row + 1)) - set(sent) - set(kept) | {zero_row})

    def tensor(values):
        return torch.tensor(values, dtype=torch.int64, device=device)

    return ExchangeRows(tensor(sent), tensor(kept), tensor(back), tensor(unused), padded, tuple(sizes))


class _ProjectToHeads(torch.autograd.Function):
    """x [T_local, H] -> ([T, C]: the sent projection columns of this rank's head group over the whole pack,
    [T_local, K]: the kept projection (z) of this rank's tokens).

    Head group j's columns are written by a batched GEMM straight into block j of the all-to-all's
    send buffer, so no projection output is copied before it is sent (nor z out of a wider one); the
    backward multiplies the gradient the reverse all-to-all brings back by the same weights,
    summing the input gradient in the GEMMs' epilogues. The gathered weights are made again in the
    backward rather than held from the forward (every layer's would stay allocated until then).
    """

    @staticmethod
    def forward(ctx, x, layout, group, size, rows, *weights):
        sent_weight, kept_weight = rows.weights(weights)
        sent_weight = sent_weight.view(size, -1, x.shape[1])
        send = x.new_empty((size, x.shape[0], sent_weight.shape[1]))
        # One batched GEMM over the groups (x broadcast, not copied): as many tiles as one wide GEMM.
        torch.bmm(x.expand(size, *x.shape), sent_weight.transpose(1, 2), out=send)
        whole = _to_heads(send, layout, group)
        kept = x @ kept_weight.t()
        ctx.save_for_backward(x, *weights)
        ctx.layout, ctx.group, ctx.size, ctx.rows = layout, group, size, rows
        return whole, kept

    @staticmethod
    def backward(ctx, grad_whole, grad_kept):
        x, *weights = ctx.saved_tensors
        size, rows = ctx.size, ctx.rows
        sent_weight, kept_weight = rows.weights(weights)
        sent_weight = sent_weight.view(size, -1, x.shape[1])
        back = _to_tokens(grad_whole.reshape(-1, sent_weight.shape[1]), ctx.layout, ctx.group, size)
        dx, dweights = None, [None] * len(weights)
        if ctx.needs_input_grad[0]:
            # Group by group into one buffer: the groups' columns are not one GEMM's K in `back`'s layout.
            dx = grad_kept @ kept_weight
            for j in range(size):
                dx.addmm_(back[j], sent_weight[j])
        if any(ctx.needs_input_grad[5:]):
            sent_rows = rows.sent.numel()
            grads = x.new_empty((sent_rows + kept_weight.shape[0], x.shape[1]))
            torch.bmm(back.transpose(1, 2), x.expand(size, *x.shape), out=grads[:sent_rows].view(sent_weight.shape))
            torch.mm(grad_kept.t(), x, out=grads[sent_rows:])
            dweights = rows.weight_grads(grads)
        return dx, None, None, None, None, *dweights


class _ScatterHeads(torch.autograd.Function):
    """[1, T, G, f] of this rank's head group -> [1, T_local, CP * G, f]: its tokens, every head of the TP share."""

    @staticmethod
    def forward(ctx, whole, layout, group, size):
        _, _, groups, width = whole.shape
        ctx.layout, ctx.group, ctx.size = layout, group, size
        back = _to_tokens(whole.reshape(-1, groups * width), layout, group, size)
        by_token = contiguous_words(back.view(size, -1, groups, width).transpose(0, 1))
        return by_token.view(1, -1, size * groups, width)

    @staticmethod
    def backward(ctx, grad):
        _, tokens, heads, width = grad.shape
        groups = heads // ctx.size
        send = grad.reshape(tokens, ctx.size, groups * width).transpose(0, 1)
        whole = _to_heads(send, ctx.layout, ctx.group)
        return whole.view(1, -1, groups, width), None, None, None


@dataclass(frozen=True)
class ContextParallel:
    """A layer's context-parallel group (size 1: none): ranks hold zigzag token slices, kernels run head groups."""

    group: object = None
    rank: int = 0
    size: int = 1

    @classmethod
    def of(cls, group) -> ContextParallel:
        """The layer's context-parallel setting from a process group (None: one rank)."""
        if group is None:
            return cls()
        import torch.distributed as dist

        rank, size = dist.get_rank(group), dist.get_world_size(group)
        if rank < 0:
            raise ContextParallelError(
                "this rank is not a member of cp_group: build the layer with a group it belongs to"
            )
        return cls(group, rank, size)

    def local_config(self, cfg, tp_size: int = 1):
        """The kernel's per-rank config: the TP share's heads divided again by the group size."""
        if cfg.num_key_heads % self.size or cfg.num_value_heads % self.size:
            raise ContextParallelError(
                f"GDN context parallelism splits heads over TP x CP = {tp_size} x {self.size}, which must divide "
                f"the GDN heads (linear_num_key_heads={cfg.num_key_heads * tp_size}, "
                f"linear_num_value_heads={cfg.num_value_heads * tp_size})"
            )
        return replace(
            cfg, num_key_heads=cfg.num_key_heads // self.size, num_value_heads=cfg.num_value_heads // self.size
        )

    def share(self, tensor: torch.Tensor, rule: ShardRule) -> torch.Tensor:
        """This rank's head group of a tensor laid out per `rule` (a TP share's conv weight, A_log, dt_bias)."""
        return tensor if self.size == 1 else rule.local(tensor, self.rank, self.size)

    def layout(self, checked_cu_seqlens: torch.Tensor, offsets: list[int], local_tokens: int) -> ZigzagLayout:
        """The zigzag layout of a checked pack: built once per pack (every GDN layer of a step reuses it)."""
        return _layouts.get(checked_cu_seqlens, offsets, self.size, local_tokens)

    def project_to_heads(
        self, layout: ZigzagLayout, x: torch.Tensor, rows: ExchangeRows, *weights: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """([T, C]: x's projection onto `rows.sent` for this rank's head group, [T_local, K]: onto `rows.kept`)."""
        if torch.is_autocast_enabled(x.device.type):
            # Casts as autocast's linears would make them, outside the function, so its backward needs none.
            dtype = torch.get_autocast_dtype(x.device.type)
            x, weights = x.to(dtype), [w.to(dtype) for w in weights]
            with torch.autocast(x.device.type, enabled=False):
                return _ProjectToHeads.apply(x, layout, self.group, self.size, rows, *weights)
        return _ProjectToHeads.apply(x, layout, self.group, self.size, rows, *weights)

    def to_tokens(self, layout: ZigzagLayout, whole: torch.Tensor) -> torch.Tensor:
        """[1, T, G, f] of this rank's head group -> [1, T_local, CP * G, f]: its tokens, the TP share's heads."""
        return _ScatterHeads.apply(whole, layout, self.group, self.size)


class _LayoutCache:
    """The last pack's layout, keyed by the checked cu_seqlens tensor the GDN layers of one step share."""

    def __init__(self) -> None:
        self._key: tuple | None = None
        self._tensor: weakref.ref | None = None
        self._layout: ZigzagLayout | None = None

    def get(self, checked: torch.Tensor, offsets: list[int], size: int, local_tokens: int) -> ZigzagLayout:
        key = (checked._version, size, local_tokens, checked.device)
        if self._layout is not None and self._key == key and self._tensor() is checked:
            return self._layout
        check_zigzag_offsets(offsets, size, local_tokens)
        layout = zigzag_layout(offsets, size, checked.device)
        self._key, self._tensor, self._layout = key, weakref.ref(checked), layout
        return layout


_layouts = _LayoutCache()
