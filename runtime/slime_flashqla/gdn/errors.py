"""Exceptions of the GDN backend layer."""

from __future__ import annotations


class FlashQLAUnavailableError(RuntimeError):
    """FlashQLA cannot run here: the message names what was found and what is needed."""


class GDNInputError(ValueError):
    """An input chunk_gated_delta_rule refuses (the shared check, or a backend's limits), before any kernel."""
