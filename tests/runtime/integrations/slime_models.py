"""slime's `Attention` wrappers built on CPU as slime's model builds them: a small HF config, slime's args."""

from __future__ import annotations

import contextlib
from pathlib import Path
from types import SimpleNamespace

from slime_flashqla.integrations.slime import install, uninstall

MODULES = {"qwen3-next": "slime_plugins.models.qwen3_next", "qwen3.5": "slime_plugins.models.qwen3_5"}
LAYER_NUMBER = 3  # Megatron counts layers from 1: slime's hf_layer_idx is 2


def write_hf_checkpoint(directory: Path, model: str, cfg) -> Path:
    """A checkpoint folder holding only config.json, for slime's `_load_hf_config(args.hf_checkpoint)`."""
    from transformers import Qwen3_5Config, Qwen3NextConfig

    fields = {
        name: getattr(cfg, name)
        for name in (
            "hidden_size",
            "linear_num_key_heads",
            "linear_num_value_heads",
            "linear_key_head_dim",
            "linear_value_head_dim",
            "linear_conv_kernel_dim",
            "hidden_act",
            "rms_norm_eps",
        )
    }
    fields.update(num_hidden_layers=4, num_attention_heads=2, num_key_value_heads=1, head_dim=8)
    config = Qwen3NextConfig(**fields) if model == "qwen3-next" else Qwen3_5Config(text_config=fields)
    config.save_pretrained(directory)
    return directory


def slime_args(checkpoint: Path, backend: str | None) -> SimpleNamespace:
    """The fields of slime's parsed args that its Attention reads."""
    args = SimpleNamespace(hf_checkpoint=str(checkpoint), sequence_parallel=False)
    if backend is not None:
        args.qwen_gdn_backend = backend
    return args


def build_attention(module, args):
    """slime's Attention of `module` (qwen3_next or qwen3_5), as Megatron's ModuleSpec builds it."""
    return module.Attention(args, SimpleNamespace(), LAYER_NUMBER)


def packed_seq_params(cu_seqlens):
    """Megatron's PackedSeqParams (the stand-in where Megatron is absent), as slime's Attention reads it."""
    from megatron.core.packed_seq_params import PackedSeqParams

    return PackedSeqParams(cu_seqlens_q=cu_seqlens, cu_seqlens_kv=cu_seqlens, qkv_format="thd")


@contextlib.contextmanager
def integration():
    """The integration installed (its comm part off: these tests build layers), then slime's own names back."""
    installed = install(policy="off")
    assert installed is not None
    try:
        yield installed
    finally:
        uninstall()
