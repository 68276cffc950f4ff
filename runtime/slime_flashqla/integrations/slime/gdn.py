"""slime's GDN names bound to this package: its backend factory and its two layer classes.

slime's `Attention` wrappers build `Qwen3NextGatedDeltaNet(self.hf_config, self.hf_layer_idx, args=args)`
(and `Qwen3_5GatedDeltaNet`) by module-global name, and each layer takes its kernel from the
module-global `get_chunk_gated_delta_rule(args.qwen_gdn_backend)`. Binding those names to the
classes below, and the factory to this package's, puts this package's layers (grouped value
heads without repeating q/k, this package's conv, gates, norm and input checks) and backends
(`auto`, `flashqla`, `fla`, `torch`) under slime's own model code, with slime's parameter names.
"""

from __future__ import annotations

import sys
import types

from slime_flashqla.gdn import get_chunk_gated_delta_rule
from slime_flashqla.integrations.slime.patches import REPLACED_ATTR, PatchSet
from slime_flashqla.layers import gated_deltanet
from slime_flashqla.layers.config import REQUIRED_FIELDS

BACKEND_MODULE = "slime_plugins.models.qwen_gdn_backend"
QWEN3_NEXT_MODULE = "slime_plugins.models.qwen3_next"
QWEN3_5_MODULE = "slime_plugins.models.qwen3_5"
FACTORY = "get_chunk_gated_delta_rule"


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
        super().__init__(_as_megatron_builds(config), layer_idx, args=args)
        self._slime_init()


class Qwen3_5GatedDeltaNet(_SlimeLayer, gated_deltanet.Qwen3_5GatedDeltaNet):
    """slime's Qwen3_5GatedDeltaNet as this package's layer: `(config, layer_idx, args)`, same parameter names."""

    slime_module = QWEN3_5_MODULE

    def __init__(self, config, layer_idx: int = 0, args=None) -> None:
        super().__init__(_as_megatron_builds(config), layer_idx, args=args)
        self._slime_init()


LAYERS = {QWEN3_NEXT_MODULE: Qwen3NextGatedDeltaNet, QWEN3_5_MODULE: Qwen3_5GatedDeltaNet}


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
    if module.__name__ == QWEN3_NEXT_MODULE:
        _fill_transformers_names(patches, module)
