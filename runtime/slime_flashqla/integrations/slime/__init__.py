"""slime: its own source, found and imported as slime users run it (Megatron stubbed only where absent)."""

from slime_flashqla.integrations.slime.source import SlimeSourceError, import_slime_module, slime_source

__all__ = ["SlimeSourceError", "import_slime_module", "slime_source"]
