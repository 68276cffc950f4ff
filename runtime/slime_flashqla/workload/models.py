"""GDN head configurations of the Qwen models this project serves, split by tensor parallelism."""

from __future__ import annotations

import json
from pathlib import Path

from slime_flashqla.workload.heads import HeadConfig, checked_heads

# (linear_num_key_heads, linear_num_value_heads), K = V = 128, from the models' config.json files.
MODEL_HEADS = {
    "qwen3-next-80b-a3b": (16, 32),
    "qwen3.5-397b-a17b": (16, 64),
}
# Hk/Hv per rank from TP1 to TP8 for the 16/64, 16/48 and 16/32 families.
TP_HEAD_CONFIGS = ((16, 64), (16, 48), (16, 32), (8, 32), (8, 16), (4, 16), (4, 8), (2, 8), (2, 4))


def gdn_layer_config(
    key_heads: int, value_heads: int, *, head_dim: int = 128, hidden_size: int = 2048, conv_kernel: int = 4
) -> dict:
    """A Hugging Face style GDN layer config (Qwen3-Next's hidden size, short conv and norm by default)."""
    return {
        "hidden_size": hidden_size,
        "linear_num_value_heads": value_heads,
        "linear_num_key_heads": key_heads,
        "linear_key_head_dim": head_dim,
        "linear_value_head_dim": head_dim,
        "linear_conv_kernel_dim": conv_kernel,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
    }


def split_for_tp(heads: HeadConfig, tp: int) -> HeadConfig:
    """The per-rank heads under tensor parallelism `tp` (heads are split evenly across ranks)."""
    if tp <= 0 or heads.key_heads % tp or heads.value_heads % tp:
        raise ValueError(f"TP={tp} does not divide the head counts {heads}")
    return HeadConfig(heads.key_heads // tp, heads.value_heads // tp)


def model_rank_heads(models: list[str], tp: str | None) -> list[HeadConfig]:
    """Each model's heads per rank at each tensor-parallel size of `tp` (a comma list; None: 1)."""
    if tp is not None and not models:
        # --tp splits a model's heads: beside --heads alone it would do nothing the user can see.
        raise ValueError(f"--tp {tp} splits a --model's heads; give --model (--heads takes per-rank heads)")
    try:
        sizes = [int(item) for item in (tp or "1").split(",") if item.strip()]
    except ValueError:
        sizes = []
    if not sizes:
        raise ValueError(f"--tp {tp!r}: give a comma list of tensor-parallel sizes, e.g. 1,2,4")
    return [split_for_tp(model_heads(model), size) for model in models for size in sizes]


def model_heads(name_or_config: str) -> HeadConfig:
    """Heads of a named model or of a Hugging Face config.json path, checked as workload.heads checks `Hk/Hv`."""
    if name_or_config in MODEL_HEADS:
        return HeadConfig(*MODEL_HEADS[name_or_config])
    path = Path(name_or_config)
    if not path.is_file():
        raise ValueError(
            f"unknown model {name_or_config!r}: use one of {', '.join(MODEL_HEADS)} or a path to the model's "
            "config.json"
        )
    try:
        config = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{path} is not valid JSON ({error})") from None
    if isinstance(config, dict):
        config = config.get("text_config", config)  # Qwen3.5 nests the language model's config
    if not isinstance(config, dict):
        raise ValueError(f"{path} is not a JSON object of a model config")
    counts = []
    for key in ("linear_num_key_heads", "linear_num_value_heads"):
        if key not in config:
            raise ValueError(f"{path} has no {key!r} (not a Qwen GDN model config)")
        value = config[key]
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{path}: {key} must be a whole number, got {value!r}")
        counts.append(value)
    return checked_heads(*counts, f"{path}")
