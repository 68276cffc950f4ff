"""The one error type for a problem the user can fix; torch-free, so every layer of the package can raise it."""

from __future__ import annotations


class UserError(Exception):
    """A problem the user can fix (bad input, a backend this machine cannot run): the CLI prints one line, exit 2."""
