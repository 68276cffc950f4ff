"""slime's own GDN layer classes, imported from slime's source, against this package's layers on one state dict.

On CPU, slime's FLA modules are replaced by PyTorch equivalents (tests/helpers/fla_stand_ins.py)
and both layers run the same PyTorch GDN reference, so what is compared is everything around
the kernel: the projections' layouts, the short conv, q/k repeated (slime) or grouped (ours),
the gates, the gated norm and the output projection. Float64 throughout, so any difference is
a mistake rather than rounding.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from helpers import fla_stand_ins
from slime_flashqla.gdn.reference import chunk_gated_delta_rule_torch
from slime_flashqla.integrations.slime.source import GDN_MODULES, import_slime_module, slime_gdn_layer_class
from slime_flashqla.layers import Qwen3_5GatedDeltaNet, Qwen3NextGatedDeltaNet, init_like_checkpoint

OURS = {"qwen3-next": Qwen3NextGatedDeltaNet, "qwen3.5": Qwen3_5GatedDeltaNet}
LENGTHS = [1, 2, 3, 29, 7, 18]  # sequences shorter than the conv width among them


def config(hk=2, hv=6, dim=8):
    return SimpleNamespace(
        hidden_size=24,
        linear_num_key_heads=hk,
        linear_num_value_heads=hv,
        linear_key_head_dim=dim,
        linear_value_head_dim=dim,
        linear_conv_kernel_dim=4,
        hidden_act="silu",
        rms_norm_eps=1e-6,
        dtype=torch.float64,
    )


@pytest.fixture
def slime_layer(slime_source, monkeypatch):
    """A builder of slime's layer for a model, its FLA modules and kernel swapped for CPU equivalents."""

    def build(model: str, cfg):
        module = import_slime_module(GDN_MODULES[model], slime_source)
        monkeypatch.setattr(module, "ShortConvolution", fla_stand_ins.ShortConvolution, raising=False)
        monkeypatch.setattr(module, "FusedRMSNormGated", fla_stand_ins.FusedRMSNormGated, raising=False)
        monkeypatch.setattr(module, "get_chunk_gated_delta_rule", lambda backend: chunk_gated_delta_rule_torch)
        monkeypatch.setattr(module.accelerator, "current_device", lambda: "cpu")  # slime asks for a GPU
        cls = slime_gdn_layer_class(model, slime_source)
        return cls(cfg, layer_idx=0, args=SimpleNamespace(qwen_gdn_backend="fla")).double()

    return build


@pytest.mark.parametrize("model", list(OURS))
def test_parameter_names_and_shapes_match_slime(slime_layer, model):
    """slime's HF<->Megatron conversion names these parameters; ours must be the same set, same shapes."""
    theirs = slime_layer(model, config())
    ours = OURS[model](config(), backend="torch")
    assert {k: tuple(v.shape) for k, v in ours.state_dict().items()} == {
        k: tuple(v.shape) for k, v in theirs.state_dict().items()
    }


@pytest.mark.parametrize("heads", [(2, 6), (3, 3)], ids=["gva-3", "no-gva"])
@pytest.mark.parametrize("model", list(OURS))
def test_same_weights_give_slime_s_output_and_gradients(slime_layer, model, heads):
    cfg = config(*heads)
    torch.manual_seed(0)
    ours = OURS[model](cfg, backend="torch").double()
    init_like_checkpoint(ours, std=0.2)
    theirs = slime_layer(model, cfg)
    theirs.load_state_dict(ours.state_dict(), strict=True)

    cu = torch.tensor([0, *torch.tensor(LENGTHS).cumsum(0).tolist()], dtype=torch.int32)
    x = torch.randn(1, sum(LENGTHS), cfg.hidden_size, dtype=torch.float64)
    dy = torch.randn_like(x)
    results = []
    for layer in (ours, theirs):
        xl = x.clone().requires_grad_()
        out = layer(xl, cu_seqlens=cu)
        out.backward(dy)
        results.append((out, xl.grad, {name: p.grad for name, p in layer.named_parameters()}))
    (out_a, dx_a, grads_a), (out_b, dx_b, grads_b) = results
    torch.testing.assert_close(out_a, out_b, rtol=1e-9, atol=1e-11)
    torch.testing.assert_close(dx_a, dx_b, rtol=1e-9, atol=1e-11)
    assert grads_a.keys() == grads_b.keys()
    for name in grads_a:
        torch.testing.assert_close(grads_a[name], grads_b[name], rtol=1e-9, atol=1e-11, msg=name)
