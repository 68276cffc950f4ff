"""slime: run an unmodified slime checkout with this package's GDN backends, layers and comm guard policy.

`--spec slime_flashqla.integrations.slime get_qwen3_next_spec` (or `get_qwen3_5_spec`) installs
the integration in each Megatron actor and builds slime's own spec; `python -m
slime_flashqla.integrations.slime train.py ...` lets slime's parser take `--qwen-gdn-backend
auto|torch`. docs/en/slime.md has the commands; $SLIME_FLASHQLA_SLIME=0 turns it all off.
"""

from slime_flashqla.integrations.slime.install import SWITCH_ENV, Installation, active, enabled, install, uninstall
from slime_flashqla.integrations.slime.source import SlimeSourceError, import_slime_module, slime_source
from slime_flashqla.integrations.slime.spec import get_qwen3_5_spec, get_qwen3_next_spec

__all__ = [
    "SWITCH_ENV",
    "Installation",
    "SlimeSourceError",
    "active",
    "enabled",
    "get_qwen3_5_spec",
    "get_qwen3_next_spec",
    "import_slime_module",
    "install",
    "slime_source",
    "uninstall",
]
