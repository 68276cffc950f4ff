"""Tensor-parallel GDN layers on real gloo processes against the single-process layer, float64.

Every rank builds the whole-model layer too, from the same seed, and checks its sharded layer
against it: the output, the input gradient, and each parameter gradient against this rank's
slices of the whole layer's gradient; the unsharded checkpoint round-trips through
`load_state_dict` and `full_state_dict`.
"""

from __future__ import annotations

import pytest
import torch

from runtime.comm_guard.comm_guard_harness import run_world
from slime_flashqla.layers import Qwen3_5GatedDeltaNet, Qwen3NextGatedDeltaNet, init_like_checkpoint
from slime_flashqla.workload.models import gdn_layer_config

pytestmark = pytest.mark.distributed
CLASSES = {"qwen3-next": Qwen3NextGatedDeltaNet, "qwen3.5": Qwen3_5GatedDeltaNet}
LENGTHS = [1, 3, 26, 9, 25]  # 64 tokens: sequences shorter than the conv width, split evenly by 2 and 4


def _rank(rank, world_size, model, sequence_parallel):
    import torch.distributed as dist

    cls = CLASSES[model]
    config = {**gdn_layer_config(4, 8, head_dim=8, hidden_size=24), "linear_value_head_dim": 4}
    torch.manual_seed(0)
    whole = cls(config, backend="torch").double()
    init_like_checkpoint(whole, std=0.2)
    checkpoint = {k: v.clone() for k, v in whole.state_dict().items()}
    sharded = cls(config, backend="torch", tp_group=dist.group.WORLD, sequence_parallel=sequence_parallel).double()
    sharded.load_state_dict(checkpoint)

    gen = torch.Generator().manual_seed(1)
    cu = torch.tensor([0, *torch.tensor(LENGTHS).cumsum(0).tolist()], dtype=torch.int32)
    x = torch.randn(1, sum(LENGTHS), 24, generator=gen, dtype=torch.float64)
    dy = torch.randn(1, sum(LENGTHS), 24, generator=gen, dtype=torch.float64)
    xw = x.clone().requires_grad_()
    ref = whole(xw, cu_seqlens=cu)
    ref.backward(dy)

    def mine(t):  # this rank's tokens under sequence parallelism, else all of them
        return t.chunk(world_size, dim=1)[rank] if sequence_parallel else t

    xs = mine(x).clone().requires_grad_()
    out = sharded(xs, cu_seqlens=cu)
    out.backward(mine(dy))
    errors = {"out": (out - mine(ref)).abs().max().item(), "dx": (xs.grad - mine(xw.grad)).abs().max().item()}
    rules, whole_grads = sharded.shard_rules(), dict(whole.named_parameters())
    for name, param in sharded.named_parameters():
        expected = sharded.tp.shard(whole_grads[name].grad, rules[name])
        assert param.grad.shape == expected.shape, name
        errors[name] = (param.grad - expected).abs().max().item()
    full = sharded.full_state_dict()
    assert full.keys() == checkpoint.keys()
    errors["checkpoint"] = max((full[k] - checkpoint[k]).abs().max().item() for k in checkpoint)
    local_heads = (sharded.num_k_heads, sharded.num_v_heads)
    return errors, local_heads


@pytest.mark.parametrize("sequence_parallel", [False, True], ids=["tp", "tp+sp"])
@pytest.mark.parametrize("world_size", [2, 4])
@pytest.mark.parametrize("model", list(CLASSES))
def test_sharded_layer_matches_the_whole_layer(model, world_size, sequence_parallel):
    # Spawned, not forked: a fork after earlier tests used torch's OpenMP pool hangs the child's first
    # matmul. Four ranks of float64 reference layers on a 2-core machine: a generous deadline, still not a hang.
    results = run_world(
        _rank, world_size, start_method="spawn", deadline_s=300, model=model, sequence_parallel=sequence_parallel
    )
    for errors, local_heads in results:
        assert local_heads == (4 // world_size, 8 // world_size)
        bad = {k: v for k, v in errors.items() if not v < 1e-10}
        assert not bad, bad


def test_heads_that_do_not_divide_are_one_line_errors():
    from slime_flashqla.layers.tensor_parallel import TensorParallel

    config = Qwen3NextGatedDeltaNet(gdn_layer_config(2, 6, head_dim=8, hidden_size=16), backend="torch").config
    with pytest.raises(ValueError, match="tensor parallelism 4 must divide the GDN heads"):
        TensorParallel(size=4).local_config(config)
    with pytest.raises(ValueError, match="sequence_parallel needs a tensor-parallel group"):
        TensorParallel.of(None, sequence_parallel=True)
