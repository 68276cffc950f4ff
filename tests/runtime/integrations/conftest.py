"""slime's real source for these tests: $SLIME_SOURCE, else the shared copy beside the checkout; else skip."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SHARED_COPY = Path(__file__).resolve().parents[4] / "shared" / "third_party" / "slime-624b824"


def slime_source_dir() -> Path | None:
    """Where slime's source is for the tests, or None."""
    chosen = os.environ.get("SLIME_SOURCE")
    if chosen:
        return Path(chosen)
    return SHARED_COPY if SHARED_COPY.is_dir() else None


@pytest.fixture(scope="session")
def slime_source() -> Path:
    source = slime_source_dir()
    if source is None:
        pytest.skip(f"slime's source is not here: set SLIME_SOURCE to a slime checkout (looked for {SHARED_COPY})")
    return source
