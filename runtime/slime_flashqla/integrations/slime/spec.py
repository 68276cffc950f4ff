"""Model specs for slime's `--spec`: install the integration in this actor process, then build slime's own spec.

    --spec slime_flashqla.integrations.slime get_qwen3_next_spec
    --spec slime_flashqla.integrations.slime get_qwen3_5_spec

slime's model provider calls the spec as `spec(args, config, vp_stage)` inside every Megatron
train actor, after slime patched torch.distributed there: the one place slime runs code of the
user's choosing in each training process before the model exists.
"""

from __future__ import annotations

from slime_flashqla.integrations.slime.install import SWITCH_ENV, enabled, install, logger
from slime_flashqla.integrations.slime.source import import_slime_module

SLIME_OWN_BACKENDS = ("fla", "flashqla")


def _slime_spec(module: str, name: str, args, config, vp_stage):
    if enabled():
        install()
    else:
        backend = getattr(args, "qwen_gdn_backend", "fla")
        if backend not in SLIME_OWN_BACKENDS:
            raise ValueError(
                f"--qwen-gdn-backend {backend} needs the slime-flashqla integration, which ${SWITCH_ENV}=0 turns off: "
                f"use {' or '.join(SLIME_OWN_BACKENDS)}, or unset ${SWITCH_ENV}"
            )
        logger.info("slime-flashqla: $%s=0, so %s.%s builds slime's own layers as they are", SWITCH_ENV, module, name)
    return getattr(import_slime_module(module), name)(args, config, vp_stage)


def get_qwen3_next_spec(args, config, vp_stage=None):
    """slime's Qwen3-Next spec, its GDN layers this package's (see docs/en/slime.md)."""
    return _slime_spec("slime_plugins.models.qwen3_next", "get_qwen3_next_spec", args, config, vp_stage)


def get_qwen3_5_spec(args, config, vp_stage=None):
    """slime's Qwen3.5 spec, its GDN layers this package's (see docs/en/slime.md)."""
    return _slime_spec("slime_plugins.models.qwen3_5", "get_qwen3_5_spec", args, config, vp_stage)
