"""How a subcommand reports a problem the user can fix: raise UserError; `main` prints it as one line."""

from __future__ import annotations

from slime_flashqla.errors import UserError


def user_error_types() -> tuple[type[BaseException], ...]:
    """Exceptions `main` reports as the user's problem: the message alone, exit status 2."""
    from slime_flashqla.gdn.errors import FlashQLAUnavailableError
    from slime_flashqla.kernels.archive import ArchiveError

    # ImportError: a kernel package that is not installed (the runtime's messages name its pip
    # package); ValueError: input the runtime refuses; OSError: a path that cannot be read or written;
    # ArchiveError: a kernel cache archive or cache directory that cannot be used.
    return (UserError, FlashQLAUnavailableError, ImportError, ValueError, OSError, ArchiveError)


def one_line(error: BaseException) -> str:
    """The exception's message on one line: whitespace runs become one space, other control characters escapes."""
    text = " ".join(str(error).split())
    # An escape sequence in a file name or an archive's text must not rewrite the terminal.
    text = "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode() for ch in text)
    return text or type(error).__name__
