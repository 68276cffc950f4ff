"""What the GDN layers refuse, and the edge inputs they serve: one-line errors naming the field, never torch internals.

Rules: a config is checked whole when the layer is built (positive integer sizes, a floating
dtype); a tensor-parallel or context-parallel layer checks that every rank of its groups built
the same layer and that this rank belongs to them; a mis-shaped checkpoint names its parameter;
T = 0, B = 0, meta inputs and packs holding empty sequences give what the kernel API gives
(issue 34: ND10-ND15).
"""

from __future__ import annotations

import pytest
import torch

from runtime.comm_guard.comm_guard_harness import run_world
from slime_flashqla.layers import GDNConfig, Qwen3_5GatedDeltaNet, Qwen3NextGatedDeltaNet, init_like_checkpoint
from slime_flashqla.workload.models import gdn_layer_config

CLASSES = {"qwen3-next": Qwen3NextGatedDeltaNet, "qwen3.5": Qwen3_5GatedDeltaNet}


def _config(**changes):
    return {**gdn_layer_config(2, 4, head_dim=8, hidden_size=16), **changes}


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("linear_num_key_heads", 0, "linear_num_key_heads must be a positive whole number, got 0"),
        ("linear_num_value_heads", 0, "linear_num_value_heads must be a positive whole number, got 0"),
        ("linear_num_key_heads", -2, "linear_num_key_heads must be a positive whole number, got -2"),
        ("linear_key_head_dim", 0, "linear_key_head_dim must be a positive whole number, got 0"),
        ("hidden_size", 0, "hidden_size must be a positive whole number, got 0"),
        ("linear_conv_kernel_dim", 0, "linear_conv_kernel_dim must be a positive whole number, got 0"),
        ("linear_num_key_heads", 2.5, "linear_num_key_heads must be a positive whole number, got 2.5"),
        ("linear_num_key_heads", True, "linear_num_key_heads must be a positive whole number, got True"),
        ("dtype", "foo", "dtype 'foo' is not a torch floating dtype"),
        ("dtype", "int32", "dtype 'int32' is not a torch floating dtype"),
        ("dtype", torch.int64, "dtype torch.int64 is not a torch floating dtype"),
    ],
)
def test_configs_are_checked_whole_in_one_line(field, value, message):
    with pytest.raises(ValueError, match=f"^GDN layer config: {message}"):
        GDNConfig.from_hf(_config(**{field: value}))


def test_integral_floats_and_dtype_names_are_accepted():
    cfg = GDNConfig.from_hf(_config(linear_num_key_heads=2.0, dtype="torch.bfloat16"))
    assert (cfg.num_key_heads, cfg.dtype) == (2, torch.bfloat16)


@pytest.mark.parametrize("model", list(CLASSES))
@pytest.mark.parametrize("shape", [(1, 0, 16), (0, 5, 16)], ids=["T=0", "B=0"])
def test_empty_inputs_give_empty_outputs(model, shape):
    layer = CLASSES[model](_config(), backend="torch")
    x = torch.randn(*shape, requires_grad=True)
    cu = torch.tensor([0, 0], dtype=torch.int32) if shape[0] == 1 else None
    out = layer(x, cu_seqlens=cu)
    assert out.shape == shape
    out.sum().backward()
    assert x.grad.shape == shape


@pytest.mark.parametrize("model", list(CLASSES))
def test_meta_inputs_give_meta_outputs_of_the_right_shape(model):
    layer = CLASSES[model](_config(), backend="torch")
    out = layer(torch.empty(1, 7, 16, device="meta"), cu_seqlens=torch.tensor([0, 3, 7], dtype=torch.int32))
    assert out.is_meta and out.shape == (1, 7, 16)


@pytest.mark.parametrize("model", list(CLASSES))
@pytest.mark.parametrize("offsets", [[0, 5, 5, 10], [0, 0, 5, 10], [0, 5, 10, 10]])
def test_packs_holding_empty_sequences_match_the_packs_without_them(model, offsets):
    torch.manual_seed(0)
    layer = CLASSES[model](_config(), backend="torch").double()
    init_like_checkpoint(layer, std=0.2)
    x = torch.randn(1, 10, 16, dtype=torch.float64)
    plain = layer(x, cu_seqlens=torch.tensor([0, 5, 10], dtype=torch.int32))
    torch.testing.assert_close(layer(x, cu_seqlens=torch.tensor(offsets, dtype=torch.int32)), plain)


def _outsider(rank, world_size):
    import torch.distributed as dist

    group = dist.new_group([0, 1])
    try:
        Qwen3NextGatedDeltaNet(_config(), backend="torch", tp_group=group)
    except ValueError as error:
        return str(error)
    return "built"


@pytest.mark.distributed
def test_a_rank_outside_tp_group_is_told_so():
    results = run_world(_outsider, 3, start_method="spawn", deadline_s=180)
    assert results[:2] == ["built", "built"]
    assert results[2] == "this rank is not a member of tp_group: build the layer with a group it belongs to"


def _mismatched(rank, world_size, whole):
    import torch.distributed as dist

    heads = (2, 4) if rank == 0 else (4, 8)
    config = _config(linear_num_key_heads=heads[0], linear_num_value_heads=heads[1])
    try:
        if whole:
            Qwen3NextGatedDeltaNet(config, backend="torch").compute_on_share(cp_group=dist.group.WORLD)
        else:
            Qwen3NextGatedDeltaNet(config, backend="torch", tp_group=dist.group.WORLD)
    except ValueError as error:
        return str(error)
    return "built"


@pytest.mark.distributed
@pytest.mark.parametrize("whole", [False, True], ids=["sharded-tp", "whole-cp"])
def test_ranks_that_built_different_layers_are_refused_at_build(whole):
    for message in run_world(_mismatched, 2, start_method="spawn", deadline_s=180, whole=whole):
        assert message.startswith("the ranks of this GDN layer's parallel group built different layers:"), message
        assert "rank 0: 2/4 heads" in message and "rank 1: 4/8 heads" in message


def _misshaped(rank, world_size, model):
    import torch.distributed as dist

    whole = CLASSES[model](_config(), backend="torch")
    state = whole.state_dict()
    name = "in_proj_qkvz.weight" if model == "qwen3-next" else "in_proj_qkv.weight"
    state[name] = torch.cat([state[name], torch.zeros(6, 16)])
    layer = CLASSES[model](_config(), backend="torch", tp_group=dist.group.WORLD)
    try:
        layer.load_state_dict(state)
    except (ValueError, RuntimeError) as error:
        return str(error)
    return "loaded"


@pytest.mark.distributed
@pytest.mark.parametrize("model", list(CLASSES))
def test_a_mis_shaped_checkpoint_names_the_parameter_under_tp(model):
    name = "in_proj_qkvz.weight" if model == "qwen3-next" else "in_proj_qkv.weight"
    rows = 2 * 16 + 2 * 32 if model == "qwen3-next" else 2 * 16 + 32
    for message in run_world(_misshaped, 2, start_method="spawn", deadline_s=180, model=model):
        assert message == (
            f"size mismatch for {name}: the checkpoint's tensor is ({rows + 6}, 16), the whole model's is ({rows}, 16)"
        )
