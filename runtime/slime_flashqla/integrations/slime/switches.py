"""The integration's on/off environment switches: unset or 1 is on, 0 is off, anything else a one-line ValueError."""

from __future__ import annotations

import os


def switch_on(name: str, on: str, off: str) -> bool:
    """Whether $`name` is on; `on`/`off` say what 1 and 0 do, for the refusal of any other value."""
    value = os.environ.get(name, "").strip()
    if value in ("", "1"):
        return True
    if value == "0":
        return False
    raise ValueError(f"${name} is {value!r}: set 1 (or leave it unset) to {on}, 0 to {off}")
