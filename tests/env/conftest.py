"""The `network` tests' pip: env/pip.txt's, fetched once per session; they skip where PyPI is out of reach."""

from __future__ import annotations

import pytest

from helpers.pypi import PyPIUnreachable, fetch_pinned_pip


@pytest.fixture(scope="session")
def pypi_pip(tmp_path_factory) -> list[str]:
    """The command line of the pinned pip (skips the test, saying why, where PyPI cannot be reached)."""
    try:
        return fetch_pinned_pip(tmp_path_factory.mktemp("pip"))
    except PyPIUnreachable as unreachable:
        pytest.skip(str(unreachable))
