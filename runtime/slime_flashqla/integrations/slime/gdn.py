"""slime's GDN names bound to this package: its backend factory, its two layer classes and their `Attention`.

slime's `Attention` wrappers build `Qwen3NextGatedDeltaNet(self.hf_config, self.hf_layer_idx, args=args)`
(and `Qwen3_5GatedDeltaNet`) by module-global name, and each layer takes its kernel from the
module-global `get_chunk_gated_delta_rule(args.qwen_gdn_backend)`. Binding those names to the
classes below, and the factory to this package's, puts this package's layers (grouped value
heads without repeating q/k, this package's conv, gates, norm and input checks) and backends
(`auto`, `flashqla`, `fla`, `torch`) under slime's own model code, with slime's parameter names.

slime's `Attention` itself (its `HuggingfaceAttention.forward`) all-gathers the sequence over
TP and every rank's tokens over CP and runs the whole layer on every rank. Each module's
`Attention` becomes a subclass of slime's own that computes only the rank's share
(`split_attention`, docs/en/slime.md): same construction, same parameters, whole on every rank.
"""

from __future__ import annotations

import importlib
import logging
import sys
import types

from slime_flashqla.gdn import get_chunk_gated_delta_rule
from slime_flashqla.integrations.slime.patches import REPLACED_ATTR, PatchSet, original_attribute
from slime_flashqla.integrations.slime.switches import switch_on
from slime_flashqla.layers import gated_deltanet
from slime_flashqla.layers.config import REQUIRED_FIELDS

BACKEND_MODULE = "slime_plugins.models.qwen_gdn_backend"
QWEN3_NEXT_MODULE = "slime_plugins.models.qwen3_next"
QWEN3_5_MODULE = "slime_plugins.models.qwen3_5"
FACTORY = "get_chunk_gated_delta_rule"
ATTENTION = "Attention"
HF_ATTENTION_MODULE = "slime_plugins.models.hf_attention"
SPLIT_ENV = "SLIME_FLASHQLA_GDN_SPLIT"
ATTENTION_PLAN = (
    f"Attention -> slime_flashqla.integrations.slime.gdn.Attention (each rank computes its TP x CP share; "
    f"${SPLIT_ENV}=0 keeps slime's)"
)
logger = logging.getLogger("slime_flashqla.integrations.slime")


def split_summary() -> str:
    """How slime's GDN layers split across ranks under the current $SLIME_FLASHQLA_GDN_SPLIT (for doctor)."""
    if not split_enabled():
        return f"off (${SPLIT_ENV}=0): slime's own wrapper, every rank runs the whole layer (and its CP gradient fault)"
    return (
        f"on (${SPLIT_ENV} unset or 1): heads over TP x CP (head-parallel CP by all-to-all), each rank's kernel runs "
        "Hk/(TP*CP), Hv/(TP*CP) heads on whole sequences; parameters whole (docs/en/slime.md)"
    )


def split_enabled() -> bool:
    """Whether $SLIME_FLASHQLA_GDN_SPLIT lets each rank compute only its share (unset or 1: yes; 0: slime's wrapper)."""
    return switch_on(
        SPLIT_ENV, "split GDN over TP x CP ranks", "keep slime's wrapper (every rank runs the whole layer)"
    )


def _as_megatron_builds(config) -> dict:
    """The layer's sizes from slime's HF config, without its dtype: Megatron casts the modules it builds."""
    return {name: getattr(config, name, None) for name in (*REQUIRED_FIELDS, "hidden_act", "rms_norm_eps")}


class _SlimeLayer:
    """What slime's layer classes expose beyond their parameters, and where they take their kernel."""

    slime_module: str

    def _slime_init(self) -> None:
        self.gdn_backend = self.backend  # slime's attribute name (its tests read it)

    def _kernel_for(self, backend: str):
        # slime's layers call their module's factory by name when built; so does this one, so a
        # factory set on slime's module (by this integration, or by a test) is the one used.
        module = sys.modules.get(self.slime_module)
        return getattr(module, FACTORY, get_chunk_gated_delta_rule)(backend)


class Qwen3NextGatedDeltaNet(_SlimeLayer, gated_deltanet.Qwen3NextGatedDeltaNet):
    """slime's Qwen3NextGatedDeltaNet as this package's layer: `(config, layer_idx, args)`, same parameter names."""

    slime_module = QWEN3_NEXT_MODULE

    def __init__(self, config, layer_idx: int = 0, args=None) -> None:
        # Under the split Attention the kernel's heads are known only once it configures the
        # layer, which then starts the preload for them (split_attention below).
        super().__init__(_as_megatron_builds(config), layer_idx, args=args, preload_kernels=not split_enabled())
        self._slime_init()


class Qwen3_5GatedDeltaNet(_SlimeLayer, gated_deltanet.Qwen3_5GatedDeltaNet):
    """slime's Qwen3_5GatedDeltaNet as this package's layer: `(config, layer_idx, args)`, same parameter names."""

    slime_module = QWEN3_5_MODULE

    def __init__(self, config, layer_idx: int = 0, args=None) -> None:
        super().__init__(_as_megatron_builds(config), layer_idx, args=args, preload_kernels=not split_enabled())
        self._slime_init()


LAYERS = {QWEN3_NEXT_MODULE: Qwen3NextGatedDeltaNet, QWEN3_5_MODULE: Qwen3_5GatedDeltaNet}


class _SplitAttention:
    """slime's linear-attention `Attention`, each rank computing only its share of the GDN layer.

    Built as slime builds its own (same arguments, same `input_layernorm` and `linear_attn`,
    parameters whole on every rank); its forward takes what slime's takes (`[s, b, h]`, this
    rank's sequence-parallel slice of its zigzag CP slice, the whole pack's cu_seqlens) and gives
    back what slime's gives back (this rank's slice of the output, and no bias).
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.gdn_split = _configure_split(self, self.args)

    def forward(self, hidden_states, attention_mask=None, *args, packed_seq_params=None, **kwargs):
        """[s, b, h] -> ([s, b, h], None): input norm on this rank's tokens, then the GDN layer's share."""
        if packed_seq_params is None:
            raise ValueError(
                "slime's GDN Attention needs packed_seq_params: slime packs every micro-batch (qkv_format thd)"
            )
        normed = self.input_layernorm(hidden_states)
        output = self.linear_attn(normed.transpose(0, 1), cu_seqlens=packed_seq_params.cu_seqlens_q)
        return output.transpose(0, 1), None


def _configure_split(attention, args) -> str:
    """Point `attention.linear_attn` at this rank's TP x CP share (slime's Megatron groups); say how, once."""
    mpu = importlib.import_module(HF_ATTENTION_MODULE).mpu
    tp, cp = mpu.get_tensor_model_parallel_world_size(), mpu.get_context_parallel_world_size()
    if cp > 1 and getattr(args, "allgather_cp", False):
        raise ValueError(
            "slime-flashqla splits GDN over slime's per-sequence zigzag CP layout; --allgather-cp (a contiguous "
            "split of the whole stream, for DSA models) is not it: drop --allgather-cp for Qwen GDN models"
        )
    sequence_parallel = bool(getattr(args, "sequence_parallel", False)) and tp > 1
    # Under SP Megatron already sums parameters marked `sequence_parallel` over TP once per step;
    # without SP nothing would, so the layer sums its partial gradients in the backward.
    summed_by = "megatron" if sequence_parallel else "backward"
    layer = attention.linear_attn
    layer.compute_on_share(
        tp_group=mpu.get_tensor_model_parallel_group() if tp > 1 else None,
        cp_group=mpu.get_context_parallel_group() if cp > 1 else None,
        sequence_parallel=sequence_parallel,
        grads_summed_by=summed_by,
    )
    if sequence_parallel:
        # slime's input norm runs on this rank's sequence-parallel tokens: partial gradients too.
        layer.tp.mark_megatron_reduced(attention.input_layernorm.parameters())
    full, kernel = layer.full_config, layer.kernel_config
    summer = "Megatron (sequence_parallel)" if summed_by == "megatron" else "the backward"
    line = (
        f"slime-flashqla: GDN layer split over TP={tp}{' (sequence parallel)' if sequence_parallel else ''} x CP={cp}: "
        f"each rank's kernel runs {kernel.num_key_heads}/{kernel.num_value_heads} of {full.num_key_heads}/"
        f"{full.num_value_heads} heads on whole sequences, projections and norm on its own tokens; parameters "
        f"whole, gradients summed over TP by {summer}"
        f"{' and over DP x CP by Megatron' if cp > 1 else ''}; ${SPLIT_ENV}=0 brings slime's wrapper back"
    )
    if line not in _logged:
        _logged.add(line)
        logger.info(line)
    return line


_logged: set[str] = set()


def split_attention(original: type) -> type:
    """A subclass of slime's `Attention` class `original` whose forward computes only this rank's share."""
    return type(ATTENTION, (_SplitAttention, original), {"__module__": __name__, "__qualname__": ATTENTION})


def _set_once(patches: PatchSet, module: types.ModuleType, name: str, value) -> None:
    if name not in vars(module).get(REPLACED_ATTR, {}):
        patches.set(module, name, value)


def _fill_transformers_names(patches: PatchSet, module: types.ModuleType) -> None:
    """Bind the transformers classes qwen3_next.py imports in one `try` with FLA, where FLA's import failed."""
    if "Qwen3NextRMSNorm" in vars(module):
        return
    try:
        from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextAttention, Qwen3NextRMSNorm
    except ImportError:
        return
    _set_once(patches, module, "Qwen3NextAttention", Qwen3NextAttention)
    _set_once(patches, module, "Qwen3NextRMSNorm", Qwen3NextRMSNorm)


def patch_backend_module(patches: PatchSet, module: types.ModuleType) -> None:
    """slime's qwen_gdn_backend factory becomes this package's (auto, flashqla, fla, torch)."""
    _set_once(patches, module, FACTORY, get_chunk_gated_delta_rule)


def patch_layer_module(patches: PatchSet, module: types.ModuleType) -> None:
    """slime's qwen3_next / qwen3_5: the layer class its Attention builds, and the factory it imported."""
    layer = LAYERS[module.__name__]
    _set_once(patches, module, FACTORY, get_chunk_gated_delta_rule)
    _set_once(patches, module, layer.__name__, layer)
    if split_enabled() and isinstance(vars(module).get(ATTENTION), type):
        _set_once(patches, module, ATTENTION, split_attention(original_attribute(module, ATTENTION)))
    if module.__name__ == QWEN3_NEXT_MODULE:
        _fill_transformers_names(patches, module)
