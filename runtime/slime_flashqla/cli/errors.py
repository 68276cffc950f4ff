"""How a subcommand reports a problem the user can fix: raise UserError; `main` prints it as one line."""

from __future__ import annotations


class UserError(Exception):
    """A problem the user can fix (bad input, a backend this machine cannot run): one line, exit 2."""


def user_error_types() -> tuple[type[BaseException], ...]:
    """Exceptions `main` reports as the user's problem: the message alone, exit status 2."""
    from slime_flashqla.gdn.errors import FlashQLAUnavailableError

    # ImportError: a kernel package that is not installed (the runtime's messages name its pip
    # package); ValueError: input the runtime refuses; OSError: a path that cannot be read or written.
    return (UserError, FlashQLAUnavailableError, ImportError, ValueError, OSError)


def one_line(error: BaseException) -> str:
    """The exception's message on one line (whitespace runs, newlines included, become one space)."""
    text = " ".join(str(error).split())
    return text or type(error).__name__
