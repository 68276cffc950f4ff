"""Find slime's source and import its modules; stand-ins for Megatron's names where Megatron is not installed.

slime's GDN layer modules (`slime_plugins/models/qwen3_next.py`, `qwen3_5.py`) import a few
Megatron names at module level for their spec builders, not for the layers themselves. On a
machine without Megatron (a benchmark node, CI) those names get stand-ins that raise if
called, so the layer classes import and run as slime defines them.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import types
from pathlib import Path

SOURCE_ENV = "SLIME_SOURCE"
TESTED_SLIME = "624b824"  # the slime revision the integration's tests run against (docs/en/slime.md)
GDN_MODULES = {"qwen3-next": "slime_plugins.models.qwen3_next", "qwen3.5": "slime_plugins.models.qwen3_5"}
GDN_CLASSES = {"qwen3-next": "Qwen3NextGatedDeltaNet", "qwen3.5": "Qwen3_5GatedDeltaNet"}


class SlimeSourceError(RuntimeError):
    """slime's source cannot be found or imported: the message says what to pass."""


def slime_source(explicit: str | os.PathLike | None = None) -> Path | None:
    """The slime checkout to import from: `explicit`, else $SLIME_SOURCE, else an importable slime_plugins' root."""
    chosen = explicit or os.environ.get(SOURCE_ENV)
    if chosen:
        root = Path(chosen).expanduser().resolve()
        if not (root / "slime_plugins" / "models").is_dir():
            raise SlimeSourceError(f"{root} is not a slime checkout (no slime_plugins/models in it)")
        return root
    spec = importlib.util.find_spec("slime_plugins")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))).resolve().parent


def megatron_installed() -> bool:
    """Whether megatron.core imports here (then slime's modules get the real one)."""
    try:
        return importlib.util.find_spec("megatron.core") is not None
    except ModuleNotFoundError:
        return False


def _unavailable(name: str):
    def stand_in(*args, **kwargs):
        raise SlimeSourceError(f"{name} is a stand-in: Megatron is not installed, so slime's spec builders cannot run")

    stand_in.__name__ = name.rsplit(".", 1)[-1]
    return stand_in


def install_megatron_stand_ins() -> None:
    """Register stand-in modules for the Megatron names slime's GDN layer modules import (no-op if present)."""
    if "megatron" in sys.modules or megatron_installed():
        return
    import torch.nn as nn

    class MegatronModule(nn.Module):
        """Megatron's base module as slime's attention wrapper uses it: an nn.Module holding its config."""

        def __init__(self, config=None):
            super().__init__()
            self.config = config

    class PackedSeqParams:
        """Megatron's packed-sequence parameters: keyword fields."""

        def __init__(self, **fields):
            self.__dict__.update(fields)

    class ModuleSpec:
        """Megatron's module spec: the module and its parameters."""

        def __init__(self, module=None, params=None, submodules=None):
            self.module, self.params, self.submodules = module, params or {}, submodules

    names = {
        "megatron.core.models.gpt.gpt_layer_specs": {
            "get_gpt_decoder_block_spec": _unavailable("get_gpt_decoder_block_spec")
        },
        "megatron.core.transformer.spec_utils": {"ModuleSpec": ModuleSpec},
        "megatron.core.transformer.transformer_block": {"get_num_layers_to_build": _unavailable("get_num_layers")},
        "megatron.core.transformer.transformer_layer": {
            "get_transformer_layer_offset": _unavailable("get_transformer_layer_offset")
        },
        "megatron.core.transformer.module": {"MegatronModule": MegatronModule},
        "megatron.core.inference.contexts": {"BaseInferenceContext": type("BaseInferenceContext", (), {})},
        "megatron.core.packed_seq_params": {"PackedSeqParams": PackedSeqParams},
    }
    core_names = {
        "mpu": types.SimpleNamespace(
            get_context_parallel_world_size=lambda: 1,
            get_tensor_model_parallel_world_size=lambda: 1,
            get_context_parallel_group=_unavailable("mpu.get_context_parallel_group"),
            get_tensor_model_parallel_group=_unavailable("mpu.get_tensor_model_parallel_group"),
        ),
        "tensor_parallel": types.SimpleNamespace(
            gather_from_sequence_parallel_region=_unavailable("gather_from_sequence_parallel_region"),
            scatter_to_sequence_parallel_region=_unavailable("scatter_to_sequence_parallel_region"),
        ),
    }
    modules = {}
    for full in [*names, "megatron.core"]:
        parts = full.split(".")
        for depth in range(1, len(parts) + 1):
            name = ".".join(parts[:depth])
            modules.setdefault(name, types.ModuleType(name, "stand-in: Megatron is not installed"))
    for full, attrs in names.items():
        for attr, value in attrs.items():
            setattr(modules[full], attr, value)
    for attr, value in core_names.items():
        setattr(modules["megatron.core"], attr, value)
    for name, module in modules.items():
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(modules[parent], child, module)
    sys.modules.update(modules)


def import_slime_module(name: str, source: str | os.PathLike | None = None) -> types.ModuleType:
    """Import slime's module `name` (e.g. slime_plugins.models.qwen3_next) from its source, as slime runs it."""
    root = slime_source(source)
    if root is None:
        raise SlimeSourceError(
            f"slime's source was not found: pass --slime-source DIR (a slime checkout) or set ${SOURCE_ENV}"
        )
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    package = name.split(".")[0]
    loaded = sys.modules.get(package)
    # Resolved both: a checkout reached through a symbolic link is the same checkout.
    where = Path(loaded.__file__).resolve() if loaded is not None and getattr(loaded, "__file__", None) else None
    if where is not None and not where.is_relative_to(root.resolve()):
        raise SlimeSourceError(f"{package} is already imported from {Path(loaded.__file__).parent}, not {root}")
    install_megatron_stand_ins()
    try:
        return importlib.import_module(name)
    except ImportError as error:
        raise SlimeSourceError(f"slime's {name} does not import from {root}: {error}") from error


def slime_gdn_layer_class(model: str, source: str | os.PathLike | None = None) -> type:
    """slime's own GDN layer class for `model` ('qwen3-next' or 'qwen3.5'), also while the integration replaces it."""
    from slime_flashqla.integrations.slime.patches import original_attribute

    if model not in GDN_MODULES:
        raise SlimeSourceError(f"no slime GDN layer for {model!r}; known: {', '.join(GDN_MODULES)}")
    return original_attribute(import_slime_module(GDN_MODULES[model], source), GDN_CLASSES[model])
