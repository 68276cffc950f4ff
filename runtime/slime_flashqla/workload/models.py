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
# A Hugging Face config.json is a few KiB: a larger file is not one, and is refused unread.
MAX_CONFIG_BYTES = 16 * 2**20
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


def split_for_tp(heads: HeadConfig, tp: int, cp: int = 1) -> HeadConfig:
    """The per-rank heads under tensor parallelism `tp` and, for GDN, context parallelism `cp`.

    Under context parallelism GDN splits its heads over TP x CP ranks, each running whole sequences,
    so a rank's kernel runs heads / (tp * cp).
    """
    ranks = tp * cp
    if tp <= 0 or cp <= 0 or heads.key_heads % ranks or heads.value_heads % ranks:
        split = f"TP={tp}" if cp == 1 else f"TP={tp} x CP={cp}"
        raise ValueError(f"{split} does not divide the head counts {heads}")
    return HeadConfig(heads.key_heads // ranks, heads.value_heads // ranks)


def _sizes(option: str, text: str | None, what: str) -> list[int]:
    """A comma list of positive parallel sizes (None: [1]); ValueError naming `option` otherwise."""
    try:
        sizes = [int(item) for item in (text or "1").split(",") if item.strip()]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1:
        raise ValueError(f"{option} {text!r}: give a comma list of {what} sizes, e.g. 1,2,4")
    return sizes


def model_rank_heads(models: list[str], tp: str | None, cp: str | None = None) -> list[HeadConfig]:
    """Each model's heads per rank at each tensor-parallel size of `tp` and context-parallel size of `cp` (None: 1)."""
    for option, value in (("--tp", tp), ("--cp", cp)):
        if value is not None and not models:
            # --tp/--cp split a model's heads: beside --heads alone they would do nothing the user can see.
            raise ValueError(f"{option} {value} splits a --model's heads; give --model (--heads takes per-rank heads)")
    tps = _sizes("--tp", tp, "tensor-parallel")
    cps = _sizes("--cp", cp, "context-parallel")
    return [split_for_tp(model_heads(model), t, c) for model in models for t in tps for c in cps]


def model_names_help() -> str:
    """What a --model option takes, for its help: the known names, or a config.json (or its checkpoint folder)."""
    return f"one of {', '.join(MODEL_HEADS)}, or the path of a model's config.json (or of the folder holding it)"


def _config_path(name_or_config: str) -> Path:
    """The config.json file `--model` names (a checkpoint folder stands for its config.json); ValueError if none."""
    path = Path(name_or_config)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ValueError(f"{path} is a directory without config.json: pass the model's config.json")
        return path / "config.json"
    if path.is_file():
        return path
    if path.exists():  # a FIFO or a device would be read forever
        raise ValueError(f"{path} is not a regular file: pass the model's config.json")
    if "/" in name_or_config or name_or_config.endswith(".json"):
        raise ValueError(f"{name_or_config}: no such file")
    raise ValueError(f"unknown model {name_or_config!r}: use {model_names_help()}")


def model_heads(name_or_config: str) -> HeadConfig:
    """Heads of a named model or of a Hugging Face config.json path, checked as workload.heads checks `Hk/Hv`."""
    if name_or_config in MODEL_HEADS:
        return HeadConfig(*MODEL_HEADS[name_or_config])
    path = _config_path(name_or_config)
    size = path.stat().st_size
    if size > MAX_CONFIG_BYTES:
        raise ValueError(
            f"{path} is {size / 2**20:.0f} MiB: a model's config.json is at most {MAX_CONFIG_BYTES // 2**20} MiB"
        )
    try:
        config = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{path} is not valid JSON ({error})") from None
    except RecursionError:  # json's decoder recurses per level: `[` * 100000 is valid up to its end
        raise ValueError(f"{path} is not valid JSON (nested too deeply)") from None
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
