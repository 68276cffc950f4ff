"""Exceptions of the GDN backend layer."""

from __future__ import annotations


class FlashQLAUnavailableError(RuntimeError):
    """FlashQLA cannot run here: the message names what was found and what is needed."""
