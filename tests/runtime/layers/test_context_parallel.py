"""Head-parallel context parallelism of the GDN layers on real gloo processes, float64, against the whole layer.

Each rank holds slime's per-sequence zigzag slices of a pack (every sequence cut into 2 * CP
chunks, rank r holding chunks r and 2 * CP - 1 - r), cut here by a plain loop independent of
the layer's index arithmetic. Parameters stay whole on every rank (`compute_on_share`), as slime
keeps them: each rank's parameter gradients cover its share, and their sum over all ranks (what
Megatron's data-parallel x CP reduction and, for TP, the layer's own backward or Megatron's
sequence-parallel sum produce) must be the whole layer's gradient.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from runtime.comm_guard.comm_guard_harness import run_world
from slime_flashqla.layers import Qwen3_5GatedDeltaNet, Qwen3NextGatedDeltaNet, init_like_checkpoint
from slime_flashqla.layers.context_parallel import (
    GROUP_ALIGN,
    ContextParallelError,
    check_zigzag_offsets,
    exchange_rows,
    zigzag_layout,
)
from slime_flashqla.workload.models import gdn_layer_config

CLASSES = {"qwen3-next": Qwen3NextGatedDeltaNet, "qwen3.5": Qwen3_5GatedDeltaNet}


def zigzag_rows(offsets: list[int], size: int, rank: int) -> list[int]:
    """The pack's rows rank `rank` holds under slime's per-sequence zigzag, in its order (a plain loop)."""
    rows = []
    for start, end in itertools.pairwise(offsets):
        chunk = (end - start) // (2 * size)
        for index in (rank, 2 * size - 1 - rank):
            rows.extend(range(start + index * chunk, start + (index + 1) * chunk))
    return rows


def padded_offsets(lengths: list[int], multiple: int) -> list[int]:
    """Packed offsets of `lengths`, each padded up to a multiple (as slime's slice_with_cp pads)."""
    offsets = [0]
    for n in lengths:
        offsets.append(offsets[-1] + -(-n // multiple) * multiple)
    return offsets


@pytest.mark.parametrize("size", [1, 2, 3, 4])
def test_zigzag_layout_agrees_with_a_plain_loop(size):
    offsets = padded_offsets([1, 2, 3, 29, 7, 0, 18], 2 * size)
    layout = zigzag_layout(offsets, size, "cpu")
    stacked = [row for rank in range(size) for row in zigzag_rows(offsets, size, rank)]
    # natural[p]: where the pack's row p sits among the ranks' stacked slices
    assert [stacked[i] for i in layout.natural.tolist()] == list(range(offsets[-1]))
    assert layout.zigzag[layout.natural].tolist() == list(range(offsets[-1]))


def test_exchange_rows_pad_each_group_and_gather_each_weight_s_gradient_back():
    # Two weights of 12 rows each (stacked with a zero row: 25). 2 head groups x 2 layout groups
    # send 5 rows each, rows 22-23 are kept (as z), rows 10-11 are used by nothing.
    def columns(j, g):
        return [r if r < 10 else r + 2 for r in (10 * j + 5 * g + c for c in range(5))]

    rows = exchange_rows(2, 2, columns, [22, 23], (12, 12), "cpu")
    assert rows.padded == GROUP_ALIGN
    assert rows.sent.view(4, GROUP_ALIGN)[:, 5:].eq(24).all()
    weights = [torch.randn(12, 3, dtype=torch.float64, requires_grad=True) for _ in range(2)]
    sent, kept = rows.weights(weights)
    grad_sent, grad_kept = torch.randn_like(sent), torch.randn_like(kept)
    plain = torch.autograd.grad((sent * grad_sent).sum() + (kept * grad_kept).sum(), weights)
    ours = rows.weight_grads(torch.cat([grad_sent, grad_kept]))
    for a, b in zip(ours, plain, strict=True):
        assert torch.equal(a, b)
    assert ours[0][10:12].eq(0).all()


def test_packs_slime_could_not_have_cut_are_one_line_errors():
    with pytest.raises(ContextParallelError, match="sequence 1 of the pack has 6 tokens, not a multiple of 2"):
        check_zigzag_offsets([0, 8, 14, 16], 2, 8)
    with pytest.raises(ContextParallelError, match="ends at 16 tokens, but 2 ranks holding 4 tokens each"):
        check_zigzag_offsets([0, 8, 16], 2, 4)


def _rank(rank, world_size, model, tp, cp, sequence_parallel, grads_summed_by, lengths):
    import torch.distributed as dist

    # Megatron's rank order: TP fastest, then CP.
    tp_rank, cp_rank = rank % tp, rank // tp
    groups = {}
    for c in range(cp):
        groups[("tp", c)] = dist.new_group([c * tp + t for t in range(tp)])
    for t in range(tp):
        groups[("cp", t)] = dist.new_group([c * tp + t for c in range(cp)])
    tp_group = groups[("tp", cp_rank)] if tp > 1 else None
    cp_group = groups[("cp", tp_rank)] if cp > 1 else None

    cls = CLASSES[model]
    config = {**gdn_layer_config(4, 8, head_dim=8, hidden_size=24), "linear_value_head_dim": 4}
    torch.manual_seed(0)
    whole = cls(config, backend="torch").double()
    init_like_checkpoint(whole, std=0.2)
    split = cls(config, backend="torch").double()
    split.load_state_dict(whole.state_dict())
    split.compute_on_share(
        tp_group=tp_group, cp_group=cp_group, sequence_parallel=sequence_parallel, grads_summed_by=grads_summed_by
    )

    offsets = padded_offsets(lengths, 2 * cp)
    cu = torch.tensor(offsets, dtype=torch.int32)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(1, offsets[-1], 24, generator=gen, dtype=torch.float64)
    dy = torch.randn(1, offsets[-1], 24, generator=gen, dtype=torch.float64)
    xw = x.clone().requires_grad_()
    ref = whole(xw, cu_seqlens=cu)
    ref.backward(dy)

    rows = torch.tensor(zigzag_rows(offsets, cp, cp_rank))

    def mine(t):  # this rank's zigzag rows, then its sequence-parallel slice of them
        t = t[:, rows]
        return t.chunk(tp, dim=1)[tp_rank] if sequence_parallel else t

    calls = []
    kernel = split.chunk_gated_delta_rule
    split.chunk_gated_delta_rule = lambda q, k, v, **kw: calls.append((q.shape, v.shape)) or kernel(q, k, v, **kw)
    xs = mine(x).clone().requires_grad_()
    out = split(xs, cu_seqlens=cu)
    out.backward(mine(dy))
    errors = {"out": (out - mine(ref)).abs().max().item(), "dx": (xs.grad - mine(xw.grad)).abs().max().item()}
    # What Megatron does next: every gradient summed over data-parallel x CP ranks, and under
    # sequence parallelism the parameters marked `sequence_parallel` summed over TP.
    for name, param in split.named_parameters():
        grad = param.grad.clone()
        if cp_group is not None:
            dist.all_reduce(grad, group=cp_group)
        if getattr(param, "sequence_parallel", False):
            dist.all_reduce(grad, group=tp_group)
        errors[name] = (grad - dict(whole.named_parameters())[name].grad).abs().max().item()
    return errors, [tuple(shape) for pair in calls for shape in pair]


LENGTHS = [1, 2, 3, 29, 7, 18]  # shorter than the conv width, and across every chunk edge once padded
SPLITS = [
    pytest.param(2, 1, False, "backward", id="tp2"),
    pytest.param(2, 1, True, "megatron", id="tp2-sp-megatron"),
    pytest.param(2, 1, True, "backward", id="tp2-sp-backward"),
    pytest.param(1, 2, False, "backward", id="cp2"),
    pytest.param(2, 2, True, "megatron", id="tp2xcp2-sp"),
    pytest.param(2, 2, False, "backward", id="tp2xcp2"),
    pytest.param(1, 4, False, "backward", id="cp4"),
]


@pytest.mark.distributed
@pytest.mark.parametrize(("tp", "cp", "sequence_parallel", "grads_summed_by"), SPLITS)
@pytest.mark.parametrize("model", list(CLASSES))
def test_split_layer_matches_the_whole_layer(model, tp, cp, sequence_parallel, grads_summed_by):
    results = run_world(
        _rank, tp * cp, start_method="spawn", deadline_s=300, model=model, tp=tp, cp=cp,
        sequence_parallel=sequence_parallel, grads_summed_by=grads_summed_by, lengths=LENGTHS,
    )  # fmt: skip
    tokens = padded_offsets(LENGTHS, 2 * cp)[-1]
    for errors, shapes in results:
        bad = {k: v for k, v in errors.items() if not v < 1e-10}
        assert not bad, bad
        # the kernel saw the whole pack for this rank's share of the heads: Hk/(TP*CP), Hv/(TP*CP)
        assert shapes == [(1, tokens, 4 // (tp * cp), 8), (1, tokens, 8 // (tp * cp), 4)]
