"""Qwen3-Next and Qwen3.5 Gated DeltaNet layers on a selectable GDN backend."""

from slime_flashqla.layers.config import GDNConfig
from slime_flashqla.layers.gated_deltanet import (
    Qwen3_5GatedDeltaNet,
    Qwen3NextGatedDeltaNet,
    init_like_checkpoint,
    packed_batch,
    resolve_backend,
)

__all__ = [
    "GDNConfig",
    "Qwen3NextGatedDeltaNet",
    "Qwen3_5GatedDeltaNet",
    "init_like_checkpoint",
    "packed_batch",
    "resolve_backend",
]
