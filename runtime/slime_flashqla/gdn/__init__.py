"""GDN kernel backends for chunk_gated_delta_rule: `fla`, `flashqla`, `torch` and `auto`.

Nothing here imports fla, flash_qla, tilelang or triton until a kernel is asked for, and the
package itself imports nothing heavy: each name below loads its module on first use, so
`slime_flashqla.gdn.names` stays torch-free for the CLI.
"""

import importlib

_HOMES = {
    "BACKENDS": "names",
    "DEFAULT_BACKEND": "names",
    "AutoGDNKernel": "api",
    "GDNKernel": "api",
    "BackendChoice": "backends.auto",
    "choose_backend": "backends.auto",
    "explain_auto": "backends.auto",
    "get_chunk_gated_delta_rule": "api",
    "FlashQLAUnavailableError": "errors",
    "GDNInputError": "errors",
    "GDNShape": "inputs",
    "check_inputs": "inputs",
    "RuntimeStatus": "backends.flashqla.runtime",
    "flashqla_runtime_status": "backends.flashqla.runtime",
    "validate_flashqla_runtime": "backends.flashqla.runtime",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str):
    """Load a public name from its module on first use (PEP 562)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The public names too, before their first use: what tab completion lists."""
    return sorted({*globals(), *_HOMES})
