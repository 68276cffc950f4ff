"""slime's own HF <-> Megatron weight conversion maps onto the layers the integration builds, unchanged.

Both directions run slime's real functions: `megatron_to_hf.convert_qwen3_next_to_hf` /
`convert_qwen3_5_to_hf` (weight sync and checkpoint export) name each parameter of the
Attention slime builds; `hf_to_megatron.qwen3_next_hf_tensor` / `qwen3_5_hf_tensor` (checkpoint
loading) read each one back from a real safetensors checkpoint through slime's SafetensorReader.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from slime_flashqla.integrations.slime import gdn, import_slime_module
from slime_flashqla.layers import init_like_checkpoint

from . import slime_models
from .test_slime_layers import config

pytestmark = pytest.mark.slime

CONVERSION = {
    "qwen3-next": ("qwen3_next", "convert_qwen3_next_to_hf", "qwen3_next_hf_tensor", "model.layers"),
    "qwen3.5": ("qwen3_5", "convert_qwen3_5_to_hf", "qwen3_5_hf_tensor", "model.language_model.layers"),
}
# slime's Megatron names of this layer's parameters: the GPT model's wrappers, the decoder layer, its attention.
MEGATRON_PREFIX = "module.module.decoder.layers.{layer}.self_attention."


@pytest.fixture
def attention_through_integration(slime_source, tmp_path):
    def build(model: str):
        module = import_slime_module(slime_models.MODULES[model], slime_source)
        checkpoint = slime_models.write_hf_checkpoint(tmp_path / "config", model, config())
        with slime_models.integration():
            attention = slime_models.build_attention(module, slime_models.slime_args(checkpoint, "torch"))
        assert type(attention.linear_attn).__module__ == gdn.__name__
        init_like_checkpoint(attention.linear_attn, std=0.2)
        return attention

    return build


@pytest.mark.parametrize("model", list(CONVERSION))
def test_slime_s_conversion_names_our_parameters_and_reads_them_back(
    slime_source, attention_through_integration, tmp_path, model
):
    from safetensors.torch import save_file

    stem, to_hf_name, from_hf_name, hf_layers = CONVERSION[model]
    to_hf = getattr(
        import_slime_module(f"slime.backends.megatron_utils.megatron_to_hf.{stem}", slime_source), to_hf_name
    )
    hf_to_megatron = import_slime_module(f"slime.backends.megatron_utils.hf_to_megatron.{stem}", slime_source)
    reader_module = import_slime_module("slime.backends.megatron_utils.hf_to_megatron.common", slime_source)
    attention = attention_through_integration(model)
    layer = slime_models.LAYER_NUMBER - 1
    # The fields megatron_to_hf reads before it matches a name (they size the full-attention layers).
    args = SimpleNamespace(kv_channels=8, hidden_size=24, num_attention_heads=2, num_query_groups=1)

    exported = {}
    for name, param in attention.state_dict().items():
        converted = to_hf(args, MEGATRON_PREFIX.format(layer=layer) + name, param)
        assert [hf for hf, _ in converted] == [f"{hf_layers}.{layer}.{name}"], name
        assert converted[0][1] is param  # passed through unchanged: same layout as the checkpoint
        exported.update(converted)
    assert any(name.startswith("linear_attn.") for name in attention.state_dict())

    save_file({k: v.contiguous() for k, v in exported.items()}, str(tmp_path / "model.safetensors"))
    reader = reader_module.SafetensorReader(tmp_path)
    hf_config = SimpleNamespace(text_config=SimpleNamespace()) if model == "qwen3.5" else SimpleNamespace()
    read_back = {
        name: getattr(hf_to_megatron, from_hf_name)(
            MEGATRON_PREFIX.format(layer=layer).removeprefix("module.module.") + name, reader, hf_config
        ).clone()
        for name in attention.state_dict()
    }
    fresh = attention_through_integration(model)
    fresh.load_state_dict(read_back, strict=True)
    for name, tensor in attention.state_dict().items():
        torch.testing.assert_close(fresh.state_dict()[name], tensor, rtol=0, atol=0, msg=name)
