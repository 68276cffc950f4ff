"""slime's own GDN layer classes, imported from slime's source, against this package's layers on one state dict.

On CPU, slime's FLA modules are replaced by PyTorch equivalents (tests/helpers/fla_stand_ins.py)
and both layers run the same PyTorch GDN reference, so what is compared is everything around
the kernel: the projections' layouts, the short conv, q/k repeated (slime) or grouped (ours),
the gates, the gated norm and the output projection. Float64 throughout, so any difference is
a mistake rather than rounding. The tests marked `slime` below build the layers the way a slime
run does, through slime's own `Attention` wrapper, before and after the integration is installed.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from helpers import fla_stand_ins
from slime_flashqla.gdn import get_chunk_gated_delta_rule
from slime_flashqla.gdn.backends.torch.reference import chunk_gated_delta_rule_torch
from slime_flashqla.integrations.slime import gdn
from slime_flashqla.integrations.slime.source import (
    GDN_CLASSES,
    GDN_MODULES,
    import_slime_module,
    slime_gdn_layer_class,
)
from slime_flashqla.layers import Qwen3_5GatedDeltaNet, Qwen3NextGatedDeltaNet, init_like_checkpoint
from slime_flashqla.workload.models import gdn_layer_config

from . import slime_models

OURS = {"qwen3-next": Qwen3NextGatedDeltaNet, "qwen3.5": Qwen3_5GatedDeltaNet}
LENGTHS = [1, 2, 3, 29, 7, 18]  # sequences shorter than the conv width among them


def config(hk=2, hv=6, dim=8):
    """The config object slime's layer classes read, built as tools/gpu's scripts build theirs, small and float64."""
    return SimpleNamespace(**gdn_layer_config(hk, hv, head_dim=dim, hidden_size=24), dtype=torch.float64)


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


@pytest.fixture
def slime_model_module(slime_source, monkeypatch):
    """slime's model module for a model, on CPU: FLA's modules swapped for PyTorch ones, the kernel for the reference.

    Where FLA is missing, qwen3_next.py's one `try` also leaves transformers' classes unbound: bound here.
    """
    from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextAttention, Qwen3NextRMSNorm

    def load(model: str):
        module = import_slime_module(GDN_MODULES[model], slime_source)
        monkeypatch.setattr(module, "ShortConvolution", fla_stand_ins.ShortConvolution, raising=False)
        monkeypatch.setattr(module, "FusedRMSNormGated", fla_stand_ins.FusedRMSNormGated, raising=False)
        monkeypatch.setattr(module, "get_chunk_gated_delta_rule", lambda backend: chunk_gated_delta_rule_torch)
        monkeypatch.setattr(module.accelerator, "current_device", lambda: "cpu")
        if model == "qwen3-next":
            monkeypatch.setattr(module, "Qwen3NextAttention", Qwen3NextAttention, raising=False)
            monkeypatch.setattr(module, "Qwen3NextRMSNorm", Qwen3NextRMSNorm, raising=False)
        return module

    return load


def _run_attention(attention, x, cu, dy):
    """slime's Attention.forward on a packed batch as Megatron calls it ([T, 1, hidden]); output and gradients."""
    xl = x.clone().requires_grad_()
    out, bias = attention(xl, attention_mask=None, packed_seq_params=slime_models.packed_seq_params(cu))
    assert bias is None
    out.backward(dy)
    return out, xl.grad, {name: p.grad for name, p in attention.named_parameters()}


@pytest.mark.slime
@pytest.mark.parametrize("model", list(OURS))
def test_slime_s_attention_builds_our_layer_through_the_integration(slime_model_module, tmp_path, model):
    """slime's own Attention wrapper, unchanged: before install it builds slime's layer, after it ours, same results."""
    cfg = config()
    module = slime_model_module(model)
    checkpoint = slime_models.write_hf_checkpoint(tmp_path, model, cfg)
    torch.manual_seed(0)
    theirs = slime_models.build_attention(module, slime_models.slime_args(checkpoint, "fla")).double()
    assert type(theirs.linear_attn).__module__ == module.__name__
    with slime_models.integration():
        ours = slime_models.build_attention(module, slime_models.slime_args(checkpoint, "torch")).double()
    assert type(ours.linear_attn) is getattr(gdn, type(theirs.linear_attn).__name__)
    assert isinstance(ours.linear_attn, OURS[model])
    assert ours.linear_attn.gdn_backend == "torch" and ours.linear_attn.layer_idx == slime_models.LAYER_NUMBER - 1
    init_like_checkpoint(ours.linear_attn, std=0.2)
    theirs.load_state_dict(ours.state_dict(), strict=True)

    cu = torch.tensor([0, *torch.tensor(LENGTHS).cumsum(0).tolist()], dtype=torch.int32)
    x = torch.randn(sum(LENGTHS), 1, cfg.hidden_size, dtype=torch.float64)
    dy = torch.randn_like(x)
    out_a, dx_a, grads_a = _run_attention(ours, x, cu, dy)
    out_b, dx_b, grads_b = _run_attention(theirs, x, cu, dy)
    torch.testing.assert_close(out_a, out_b, rtol=1e-9, atol=1e-11)
    torch.testing.assert_close(dx_a, dx_b, rtol=1e-9, atol=1e-11)
    assert grads_a.keys() == grads_b.keys()
    for name in grads_a:
        torch.testing.assert_close(grads_a[name], grads_b[name], rtol=1e-9, atol=1e-11, msg=name)


@pytest.mark.slime
def test_uninstall_gives_slime_its_own_names_back(slime_model_module):
    module = slime_model_module("qwen3-next")
    before = {name: getattr(module, name) for name in ("Qwen3NextGatedDeltaNet", "get_chunk_gated_delta_rule")}
    with slime_models.integration() as installed:
        assert module.Qwen3NextGatedDeltaNet is gdn.Qwen3NextGatedDeltaNet
        assert module.get_chunk_gated_delta_rule is get_chunk_gated_delta_rule
        assert f"{module.__name__}.Qwen3NextGatedDeltaNet" in installed.replaced()
        assert module.__slime_flashqla_replaced__["Qwen3NextGatedDeltaNet"] is before["Qwen3NextGatedDeltaNet"]
        assert slime_gdn_layer_class("qwen3-next") is before["Qwen3NextGatedDeltaNet"]  # slime's own, still
    assert {name: getattr(module, name) for name in before} == before
    assert not hasattr(module, "__slime_flashqla_replaced__")


@pytest.mark.slime
@pytest.mark.parametrize("model", list(OURS))
def test_a_module_imported_again_is_patched_again(slime_source, model):
    """slime's own cu_seqlens test drops and re-imports its model modules; the integration follows them."""
    import sys

    name = GDN_MODULES[model]
    import_slime_module(name, slime_source)
    with slime_models.integration():
        sys.modules.pop(name)
        fresh = import_slime_module(name, slime_source)
        assert getattr(fresh, GDN_CLASSES[model]) is getattr(gdn, GDN_CLASSES[model])
    assert getattr(fresh, GDN_CLASSES[model]).__module__ == name


@pytest.mark.slime
def test_slime_s_backend_factory_takes_this_package_s_names_and_errors(slime_source):
    backend_module = import_slime_module(gdn.BACKEND_MODULE, slime_source)
    with slime_models.integration():
        kernel = backend_module.get_chunk_gated_delta_rule("torch")
        assert kernel.backend == "torch"
        assert backend_module.get_chunk_gated_delta_rule("auto").backend == "auto"
        with pytest.raises(
            ValueError, match=r"^unknown GDN backend 'cuda'; valid names are: fla, flashqla, torch, auto$"
        ):
            backend_module.get_chunk_gated_delta_rule("cuda")
    with pytest.raises(ValueError, match="Unsupported Qwen GDN backend: torch"):  # slime's own, back
        backend_module.get_chunk_gated_delta_rule("torch")
