"""UserError, for a problem the user can fix, and one_line, to print any error: torch-free, below the CLI."""

from __future__ import annotations


class UserError(Exception):
    """A problem the user can fix (bad input, a backend this machine cannot run): the CLI prints one line, exit 2."""


def one_line(error: BaseException) -> str:
    """The exception's message on one line: whitespace runs become one space, other control characters escapes."""
    text = " ".join(str(error).split())
    # An escape sequence in a file name or an archive's text must not rewrite the terminal.
    text = "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode() for ch in text)
    return text or type(error).__name__
