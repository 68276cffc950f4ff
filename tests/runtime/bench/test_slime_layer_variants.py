"""The benchmarks' slime-layer variants: slime's own classes from slime's source, our weights by name, parity first.

On CPU, slime's two FLA modules and the kernel are replaced as in tests/runtime/integrations
(PyTorch equivalents; the PyTorch GDN reference for both layers), so what runs is the variant's
real building path: slime's class, its config, the cast, the state-dict copy and the parity gate.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from helpers import fla_stand_ins
from slime_flashqla.bench import variants
from slime_flashqla.gdn.backends.torch.reference import chunk_gated_delta_rule_torch
from slime_flashqla.integrations.slime.source import GDN_MODULES, import_slime_module
from slime_flashqla.workload.heads import HeadConfig
from slime_flashqla.workload.setup import LAYER_MODELS, LayerSetup

SLIME_VARIANTS = [v for v in variants.VARIANTS.values() if v.slime_layer]
HEADS = HeadConfig(2, 4)


def setup(source, model="qwen3-next", device="cpu"):
    return LayerSetup(device, "float32", 8, hidden_size=32, seed=3, layer_model=model, slime_source=str(source))


@pytest.fixture
def slime_on_cpu(slime_source, monkeypatch):
    """slime's GDN modules with FLA's modules and the kernel swapped for CPU equivalents."""
    for name in GDN_MODULES.values():
        module = import_slime_module(name, slime_source)
        monkeypatch.setattr(module, "ShortConvolution", fla_stand_ins.ShortConvolution, raising=False)
        monkeypatch.setattr(module, "FusedRMSNormGated", fla_stand_ins.FusedRMSNormGated, raising=False)
        monkeypatch.setattr(module, "get_chunk_gated_delta_rule", lambda backend: chunk_gated_delta_rule_torch)
        monkeypatch.setattr(module.accelerator, "current_device", lambda: "cpu")
    return slime_source


def test_slime_variants_exist_for_both_backends_at_the_layer_level_only():
    assert {v.backend for v in SLIME_VARIANTS} == {"flashqla", "fla"}
    for v in SLIME_VARIANTS:
        assert variants.variant_problem(v, "fwd+bwd", HEADS, setup("x"), level="kernel") == (
            f"{v.name} runs at the layer level only"
        )


def test_without_slime_source_the_variant_says_why(monkeypatch, tmp_path):
    monkeypatch.delenv("SLIME_SOURCE", raising=False)
    reason = variants.slime_layer_problem(setup(tmp_path))
    assert reason == f"{tmp_path.resolve()} is not a slime checkout (no slime_plugins/models in it)"


@pytest.mark.parametrize("model", LAYER_MODELS)
def test_slime_layer_is_slime_s_class_with_our_weights(slime_on_cpu, model):
    s = setup(slime_on_cpu, model)
    variant = replace(variants.VARIANTS["slime-layer-flashqla"], backend="torch")
    layer = variants.build_layer(variant, HEADS, s)
    assert type(layer).__module__ == GDN_MODULES[model]
    ours = variants.build_layer(variants.VARIANTS["torch"], HEADS, s)
    assert type(ours).__module__.startswith("slime_flashqla.layers")
    theirs = layer.state_dict()
    assert theirs.keys() == ours.state_dict().keys()
    for name, value in ours.state_dict().items():
        assert torch.equal(value, theirs[name]), name


def test_a_layer_that_disagrees_is_refused_before_timing(slime_on_cpu, monkeypatch):
    s = setup(slime_on_cpu)
    variant = replace(variants.VARIANTS["slime-layer-fla"], backend="torch")
    module = import_slime_module(GDN_MODULES["qwen3-next"], slime_on_cpu)
    # A kernel that drops the recurrence: the layers' outputs differ by O(1).
    monkeypatch.setattr(module, "get_chunk_gated_delta_rule", lambda backend: lambda q, k, v, **kw: (v * 0, None))
    with pytest.raises(RuntimeError, match="disagree on the same weights"):
        variants.build_layer(variant, HEADS, s)
