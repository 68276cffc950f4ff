"""GDN kernel backends for chunk_gated_delta_rule: `fla`, `flashqla`, `torch` and `auto`.

Nothing here imports fla, flash_qla, tilelang or triton until a kernel is asked for.
"""

from slime_flashqla.gdn.api import (
    BACKENDS,
    AutoChunkGatedDeltaRule,
    BackendChoice,
    choose_backend,
    explain_auto,
    get_chunk_gated_delta_rule,
)
from slime_flashqla.gdn.errors import FlashQLAUnavailableError, GDNInputError
from slime_flashqla.gdn.inputs import GDNShape, check_inputs
from slime_flashqla.gdn.validation import RuntimeStatus, flashqla_runtime_status, validate_flashqla_runtime

__all__ = [
    "BACKENDS",
    "AutoChunkGatedDeltaRule",
    "BackendChoice",
    "FlashQLAUnavailableError",
    "GDNInputError",
    "GDNShape",
    "RuntimeStatus",
    "check_inputs",
    "choose_backend",
    "explain_auto",
    "flashqla_runtime_status",
    "get_chunk_gated_delta_rule",
    "validate_flashqla_runtime",
]
