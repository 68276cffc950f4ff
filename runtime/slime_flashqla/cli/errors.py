"""Which exceptions the CLI reports as the user's to fix (slime_flashqla.errors holds UserError and one_line)."""

from __future__ import annotations

from slime_flashqla.errors import UserError


def user_error_types() -> tuple[type[BaseException], ...]:
    """Exceptions `main` reports as the user's problem: the message alone, exit status 2."""
    from slime_flashqla.gdn.errors import FlashQLAUnavailableError
    from slime_flashqla.kernel_cache.archive import ArchiveError

    # ImportError: a kernel package that is not installed (the runtime's messages name its pip
    # package); ValueError: input the runtime refuses; OSError: a path that cannot be read or written;
    # ArchiveError: a kernel cache archive or cache directory that cannot be used.
    return (UserError, FlashQLAUnavailableError, ImportError, ValueError, OSError, ArchiveError)
