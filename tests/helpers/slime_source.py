"""slime's real source for the tests: $SLIME_SOURCE, else the shared copy beside the checkout."""

from __future__ import annotations

import os
from pathlib import Path

SHARED_COPY = Path(__file__).resolve().parents[3] / "shared" / "third_party" / "slime-624b824"


def slime_source_dir() -> Path | None:
    """Where slime's source is for the tests, or None."""
    chosen = os.environ.get("SLIME_SOURCE")
    if chosen:
        return Path(chosen)
    return SHARED_COPY if SHARED_COPY.is_dir() else None
