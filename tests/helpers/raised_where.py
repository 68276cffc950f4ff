"""Where an exception was raised, read from its traceback: the input check, or somewhere past it."""

from __future__ import annotations

import os
import traceback

import slime_flashqla.gdn.cu_seqlens
import slime_flashqla.gdn.inputs

PACKAGE_DIR = os.path.dirname(os.path.dirname(slime_flashqla.gdn.inputs.__file__))
CHECK_FILES = {os.path.realpath(m.__file__) for m in (slime_flashqla.gdn.inputs, slime_flashqla.gdn.cu_seqlens)}


def frame_files(error: BaseException) -> list[str]:
    """The source file of every frame the exception passed through, outermost first."""
    return [os.path.realpath(frame.filename) for frame in traceback.extract_tb(error.__traceback__)]


def raised_by_check(error: BaseException) -> bool:
    """The innermost frame is the input check's own code (not a kernel, not torch)."""
    files = frame_files(error)
    return bool(files) and files[-1] in CHECK_FILES


def raised_before_package(error: BaseException) -> bool:
    """No frame of slime_flashqla ran: Python refused the call itself (an unknown keyword)."""
    return not any(path.startswith(os.path.realpath(PACKAGE_DIR) + os.sep) for path in frame_files(error))
