"""Context parallelism for the GDN layers: head-parallel, by all-to-all between token slices and head groups.

Under context parallelism each rank holds a slice of every sequence's tokens (slime's
per-sequence zigzag: every sequence of the pack is cut into 2 * CP chunks and rank r holds
chunks r and 2 * CP - 1 - r, concatenated sequence by sequence). The recurrence of a GDN layer
runs along whole sequences, so the layer moves the short conv's and the gates' inputs of its
heads from "my tokens, all heads" to "all tokens, my head group" with one all-to-all, runs the
conv, the gates and the kernel on whole sequences for Hk/CP key heads, and moves the kernel's
output back with a second all-to-all. Projections, the gated norm and the output projection run
on the rank's own tokens. Every kernel backend works unchanged (it sees ordinary packed
sequences), and the backward of each all-to-all is the other one, so gradients are exact.
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from slime_flashqla.layers.tensor_parallel import ShardRule
from slime_flashqla.triton_ops.word_copy import contiguous_words, copy_words

# Columns per head group that the gathered rows are padded to a multiple of: the short conv reads
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
class Piece:
    """Columns of a projection output taken by the exchange: `view(base)` is [T_local, CP, G, f] to send, or,
    with `kept`, a tensor this rank keeps for itself (z), copied out so the projection's buffer can go."""

    base: int  # index of the projection output among the exchange's inputs
    view: Callable[[torch.Tensor], torch.Tensor]
    kept: bool = False


class _GatherHeads(torch.autograd.Function):
    """Projection outputs -> ([1, T, G, sum f + pad] for this rank's head group, the kept pieces' copies).

    Each group's row is padded to a multiple of GROUP_ALIGN columns; the padding is never written.

    The backward writes each projection output's gradient into one buffer through the same views,
    instead of autograd's zero-filled buffer per view and their sum.
    """

    @staticmethod
    def forward(ctx, layout, group, size, pieces, *bases):
        sent = [piece.view(bases[piece.base]) for piece in pieces if not piece.kept]
        widths = [part.shape[-1] for part in sent]
        tokens, _, groups, _ = sent[0].shape
        padded = sum(widths) + (-sum(widths)) % GROUP_ALIGN
        send = sent[0].new_empty((size, tokens, groups, padded))
        for start, part in zip(itertools.accumulate([0, *widths]), sent, strict=False):
            copy_words(send[..., start : start + part.shape[-1]], part.transpose(0, 1))
        ctx.layout, ctx.group, ctx.size, ctx.widths, ctx.pieces = layout, group, size, widths, pieces
        ctx.bases = [(b.shape, b.dtype, b.device) for b in bases]
        whole = _to_heads(send.view(size, tokens, -1), layout, group).view(1, -1, groups, padded)
        kept = [contiguous_words(piece.view(bases[piece.base])) for piece in pieces if piece.kept]
        return (whole, *kept)

    @staticmethod
    def backward(ctx, grad, *kept_grads):
        _, _, groups, width = grad.shape
        back = _to_tokens(grad.reshape(-1, groups * width), ctx.layout, ctx.group, ctx.size)
        back = back.view(ctx.size, -1, groups, width)
        sent = iter(zip(itertools.accumulate([0, *ctx.widths]), ctx.widths, strict=False))
        kept = iter(kept_grads)
        buffers = [torch.empty(shape, dtype=dtype, device=device) for shape, dtype, device in ctx.bases]
        covered = [0] * len(buffers)
        for piece in ctx.pieces:
            target = piece.view(buffers[piece.base])
            covered[piece.base] += target.numel()
            if piece.kept:
                source = next(kept)
                copy_words(target, source) if source is not None else target.zero_()
            else:
                start, size = next(sent)
                copy_words(target, back[..., start : start + size].transpose(0, 1))
        for buffer, count in zip(buffers, covered, strict=True):
            if count != buffer.numel():  # pragma: no cover - every caller's pieces cover their projection
                raise AssertionError("the exchange's pieces must cover each projection output exactly")
        return (None, None, None, None, *buffers)


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

    def to_heads(self, layout: ZigzagLayout, pieces: list[Piece], *bases: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """([1, T, G, sum f] of the sent pieces for this rank's head group, then each kept piece's copy)."""
        return _GatherHeads.apply(layout, self.group, self.size, tuple(pieces), *bases)

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
