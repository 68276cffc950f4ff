"""Megatron-core's GatedDeltaNet as a benchmark peer: our layer's weights mapped to its names and layout.

Megatron-core 0.19 needs Python >= 3.12: where it does not import, the tests that build its layer
skip, naming why. On CPU, Megatron's three FLA calls (causal_conv1d, l2norm, chunk_gated_delta_rule)
are replaced by PyTorch equivalents and torch.compile (its jit_fuser) is off, so what runs is
Megatron's own layer from its own modules: its in_proj and its split of the projection, its conv
weight, gates, q/k repeat, gated norm and out_proj, on its packed (THD) path.
"""

from __future__ import annotations

import sys
from dataclasses import replace

import pytest
import torch

from helpers import fla_stand_ins
from slime_flashqla.bench import variants
from slime_flashqla.bench.megatron_layer import (
    MEGATRON_LINEARS,
    build_megatron_gdn,
    megatron_core_problem,
    release_one_rank_group,
)
from slime_flashqla.bench.megatron_weights import megatron_gdn_state
from slime_flashqla.gdn.backends.torch.reference import chunk_gated_delta_rule_torch
from slime_flashqla.layers import Qwen3_5GatedDeltaNet, Qwen3NextGatedDeltaNet, init_like_checkpoint
from slime_flashqla.triton_ops.l2norm import l2norm_reference as l2norm
from slime_flashqla.workload.heads import HeadConfig
from slime_flashqla.workload.models import gdn_layer_config
from slime_flashqla.workload.setup import LAYER_MODELS, LayerSetup

MEGATRON = variants.VARIANTS["megatron-layer"]
CLASSES = {"qwen3-next": Qwen3NextGatedDeltaNet, "qwen3.5": Qwen3_5GatedDeltaNet}
HEADS = HeadConfig(2, 4)  # two value heads per key head: the repeat's order is tested
LENGTHS = [3, 20, 9]  # a sequence shorter than the conv


def setup(model="qwen3-next"):
    return LayerSetup("cpu", "float32", 8, hidden_size=32, seed=3, layer_model=model)


def our_layer(model, key_dim=8, value_dim=16, seed=0):
    config = gdn_layer_config(HEADS.key_heads, HEADS.value_heads, head_dim=key_dim, hidden_size=32)
    config["linear_value_head_dim"] = value_dim  # K != V: a K/V mix-up cannot pass
    torch.manual_seed(seed)
    layer = CLASSES[model](config, backend="torch", preload_kernels=False)
    init_like_checkpoint(layer)
    with torch.no_grad():  # gammas away from one, so a norm weight in the wrong place shows
        layer.norm.weight.uniform_(0.5, 1.5)
    return layer


@pytest.fixture
def megatron_on_cpu(monkeypatch):
    """Megatron-core's GDN modules with FLA's calls and the CUDA device swapped for CPU equivalents."""
    problem = megatron_core_problem()
    if problem:
        pytest.skip(problem)
    import megatron.core.ssm.gated_delta_net.common as common
    import megatron.core.ssm.gated_delta_net.gdn as gdn
    import torch.distributed as dist

    monkeypatch.setattr(common, "HAVE_FLA", True)
    monkeypatch.setattr(common, "l2norm", l2norm)
    monkeypatch.setattr(gdn, "causal_conv1d", fla_stand_ins.causal_conv1d)
    monkeypatch.setattr(gdn, "chunk_gated_delta_rule", chunk_gated_delta_rule_torch)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: "cpu")  # where Megatron puts its conv and gates
    had_group = dist.is_initialized()
    with torch._dynamo.config.patch(disable=True):  # Megatron's jit_fuser would compile C++ here
        yield
    if not had_group:
        release_one_rank_group()


def packed(hidden=32, seed=1):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(1, sum(LENGTHS), hidden, generator=gen, dtype=torch.float32)
    dy = torch.randn(1, sum(LENGTHS), hidden, generator=gen, dtype=torch.float32)
    cu = torch.tensor([0, *torch.tensor(LENGTHS).cumsum(0).tolist()], dtype=torch.int32)
    return x, dy, cu


def forward_backward(layer, x, dy, cu):
    x = x.clone().requires_grad_()
    out = layer(x, cu_seqlens=cu)
    out.backward(dy)
    return out.detach(), x.grad


def rel(a, b):
    return ((a - b).norm() / b.norm()).item()


# ---------------------------------------------------------------- on Megatron-core's own layer


@pytest.mark.parametrize("model", LAYER_MODELS)
def test_every_megatron_parameter_is_mapped_with_its_shape(megatron_on_cpu, model):
    ours = our_layer(model)
    peer = build_megatron_gdn(ours, torch.device("cpu"))
    assert peer.linears == MEGATRON_LINEARS  # no Transformer Engine on a CPU test machine
    theirs = {name: tuple(p.shape) for name, p in peer.layer.named_parameters()}
    mapped = megatron_gdn_state(ours.state_dict(), ours.full_config)
    assert theirs == {name: tuple(t.shape) for name, t in mapped.items()}
    for name, tensor in mapped.items():
        assert torch.equal(dict(peer.layer.named_parameters())[name].detach(), tensor), name


@pytest.mark.parametrize("model", LAYER_MODELS)
def test_megatron_layer_computes_ours_output_and_gradients(megatron_on_cpu, model):
    ours = our_layer(model)
    peer = build_megatron_gdn(ours, torch.device("cpu"))
    x, dy, cu = packed()
    out, dx = forward_backward(peer, x, dy, cu)
    ref_out, ref_dx = forward_backward(ours, x, dy, cu)
    assert rel(out, ref_out) < 1e-5
    assert rel(dx, ref_dx) < 1e-5
    # Every weight's gradient lands where the mapping put the weight (float32 sums in another
    # order: the gates' tiny gradients round to 1e-4; a misplaced row errs by O(1)).
    grads = megatron_gdn_state({name: p.grad for name, p in ours.named_parameters()}, ours.full_config)
    for name, p in peer.layer.named_parameters():
        assert rel(p.grad, grads[name]) < 1e-3, name


def test_the_variant_builds_megatron_s_class_with_our_weights(megatron_on_cpu):
    from megatron.core.ssm.gated_delta_net import GatedDeltaNet

    layer = variants.build_layer(replace(MEGATRON, backend="torch"), HEADS, setup())
    assert type(layer.layer) is GatedDeltaNet
    assert layer.chunk_gated_delta_rule is chunk_gated_delta_rule_torch  # the kernel Megatron calls
    assert "Megatron's own linears (no TE)" in variants.variant_note(MEGATRON)


def test_a_megatron_layer_that_disagrees_is_refused_before_timing(megatron_on_cpu, monkeypatch):
    from slime_flashqla.bench import megatron_layer

    def misplaced(state, cfg, **kwargs):
        mapped = megatron_gdn_state(state, cfg, **kwargs)
        return {**mapped, "A_log": mapped["A_log"].flip(0)}  # each head's decay on another head

    monkeypatch.setattr(megatron_layer, "megatron_gdn_state", misplaced)
    with pytest.raises(RuntimeError, match="Megatron-core's GatedDeltaNet and this package's disagree"):
        variants.build_layer(replace(MEGATRON, backend="torch"), HEADS, setup())


# ---------------------------------------------------------------- anywhere (no megatron-core needed)


def test_megatron_layer_runs_at_the_layer_level_only():
    reason = variants.variant_problem(MEGATRON, "fwd+bwd", HEADS, setup(), level="kernel")
    assert reason == "megatron-layer runs at the layer level only"


def test_where_megatron_cannot_run_the_variant_says_why_in_one_line():
    reason = variants.variant_problem(MEGATRON, "fwd+bwd", HEADS, setup(), level="layer")
    assert reason and "\n" not in reason
    problem = megatron_core_problem()
    if problem:  # Python 3.11 (CI): megatron-core does not install
        assert reason == problem
    else:  # FLA missing, or this CPU
        assert reason in (
            "Megatron-core's GatedDeltaNet runs FLA's conv, l2norm and kernel: flash-linear-attention is missing",
            "Megatron-core's GatedDeltaNet allocates on torch.cuda.current_device(): needs a CUDA device",
        )


def test_an_older_python_is_named(monkeypatch):
    monkeypatch.setattr(sys, "version_info", (3, 11, 9, "final", 0))
    assert megatron_core_problem() == "megatron-core 0.19.2 needs Python >= 3.12; this is Python 3.11"


def test_zero_centred_gammas_and_the_fused_input_norm():
    ours = our_layer("qwen3.5")
    state = ours.state_dict()
    mapped = megatron_gdn_state(state, ours.full_config, zero_centered_gamma=True, input_norm=True)
    assert torch.allclose(1 + mapped["out_norm.weight"], state["norm.weight"])
    assert torch.equal(mapped["in_proj.layer_norm_weight"], torch.zeros(32))  # 1 + 0: a unit gamma
    plain = megatron_gdn_state(state, ours.full_config, input_norm=True)
    assert torch.equal(plain["out_norm.weight"], state["norm.weight"])
    assert torch.equal(plain["in_proj.layer_norm_weight"], torch.ones(32))


def test_a_state_dict_of_another_layer_is_refused_in_one_line():
    ours = our_layer("qwen3.5")
    state = {name: t for name, t in ours.state_dict().items() if name != "in_proj_z.weight"}
    with pytest.raises(ValueError, match=r"^not a Qwen3-Next or Qwen3\.5 GDN layer's state dict") as error:
        megatron_gdn_state(state, ours.full_config)
    assert "\n" not in str(error.value)
