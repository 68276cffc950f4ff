"""Megatron-core's GatedDeltaNet parameters from a Qwen3-Next or Qwen3.5 GDN layer's (Hugging Face names), TP = 1.

Read from megatron-core 0.19.2 (megatron/core/ssm/gated_delta_net/): one `in_proj.weight` whose
rows are [q (Hk*K), k (Hk*K), v (Hv*V), z (Hv*V), beta (Hv), alpha (Hv)], each section
head-major; `conv1d.weight` over [q, k, v] as in both checkpoints; `A_log`, `dt_bias`,
`out_proj.weight` as they are; `out_norm.weight` the gated norm's gamma. Qwen3-Next's fused
projections group their rows per key head ([Hk, (K, K, g*V, g*V)] and [Hk, (g, g)], g = Hv/Hk),
so its sections are gathered across key heads; value head j stays value head j (it reads key
head j // g in both layers). Torch only: it runs where megatron-core does not install.
"""

from __future__ import annotations

import torch

from slime_flashqla.layers.config import GDNConfig

QWEN3_NEXT = ("in_proj_qkvz.weight", "in_proj_ba.weight")
QWEN3_5 = ("in_proj_qkv.weight", "in_proj_z.weight", "in_proj_b.weight", "in_proj_a.weight")
SHARED = ("conv1d.weight", "dt_bias", "A_log", "norm.weight", "out_proj.weight")


def _in_proj_sections(state: dict, cfg: GDNConfig) -> list[torch.Tensor]:
    """[q, k, v, z, b, a], each [rows, hidden] with its heads in order (Megatron's in_proj sections)."""
    if set(QWEN3_NEXT) <= state.keys():
        heads, group, hidden = cfg.num_key_heads, cfg.num_value_heads // cfg.num_key_heads, cfg.hidden_size
        k_dim, v_dim = cfg.key_head_dim, group * cfg.value_head_dim
        qkvz = state["in_proj_qkvz.weight"].view(heads, 2 * k_dim + 2 * v_dim, hidden)
        ba = state["in_proj_ba.weight"].view(heads, 2 * group, hidden)
        parts = [*torch.split(qkvz, [k_dim, k_dim, v_dim, v_dim], dim=1), *torch.split(ba, [group, group], dim=1)]
        return [part.reshape(-1, hidden) for part in parts]
    if set(QWEN3_5) <= state.keys():
        q, k, v = torch.split(state["in_proj_qkv.weight"], [cfg.key_dim, cfg.key_dim, cfg.value_dim])
        return [q, k, v, state["in_proj_z.weight"], state["in_proj_b.weight"], state["in_proj_a.weight"]]
    raise ValueError(
        f"not a Qwen3-Next or Qwen3.5 GDN layer's state dict: it needs {', '.join(QWEN3_NEXT)} or "
        f"{', '.join(QWEN3_5)}; it has {', '.join(sorted(state))}"
    )


def megatron_gdn_state(
    state: dict, cfg: GDNConfig, *, zero_centered_gamma: bool = False, input_norm: bool = False
) -> dict[str, torch.Tensor]:
    """Megatron-core GatedDeltaNet's parameters (by its names) holding the same layer as `state` (HF names).

    `zero_centered_gamma`: Megatron's norms scale by 1 + weight (config.layernorm_zero_centered_gamma,
    as Megatron-Bridge builds Qwen3-Next and Qwen3.5), so the gated norm's gamma is stored minus 1.
    `input_norm`: the in_proj carries the decoder layer's input RMSNorm (Transformer Engine's fused
    LayerNormLinear in Megatron's spec); this layer has none, so it gets a gamma of one.
    """
    missing = [name for name in SHARED if name not in state]
    if missing:
        raise ValueError(f"the GDN layer's state dict lacks {', '.join(missing)}")
    sections = _in_proj_sections(state, cfg)
    gamma = state["norm.weight"]
    mapped = {
        "in_proj.weight": torch.cat(sections),
        "conv1d.weight": state["conv1d.weight"],
        "dt_bias": state["dt_bias"],
        "A_log": state["A_log"],
        # In float32: bf16 holds 1 + w exactly only where w is coarse.
        "out_norm.weight": (gamma.float() - 1).to(gamma.dtype) if zero_centered_gamma else gamma,
        "out_proj.weight": state["out_proj.weight"],
    }
    if input_norm:
        ones = torch.ones(cfg.hidden_size, dtype=gamma.dtype, device=gamma.device)
        mapped["in_proj.layer_norm_weight"] = ones - 1 if zero_centered_gamma else ones
    return mapped


def load_megatron_gdn(module: torch.nn.Module, mapped: dict[str, torch.Tensor]) -> None:
    """Copy `mapped` into the module's parameters by name; ValueError naming any name or shape that differs."""
    params = dict(module.named_parameters())
    if params.keys() != mapped.keys():
        raise ValueError(
            f"Megatron's GatedDeltaNet has parameters {sorted(params)}; the mapping gives {sorted(mapped)}"
        )
    for name, tensor in mapped.items():
        if params[name].shape != tensor.shape:
            raise ValueError(
                f"{name}: Megatron's parameter is {tuple(params[name].shape)}, the mapping's {tuple(tensor.shape)}"
            )
    with torch.no_grad():
        for name, tensor in mapped.items():
            params[name].copy_(tensor)
