"""An autouse fixture: a test starts and ends with torch.distributed unpatched and the comm guard's counters at zero.

Import `clean_comm_guard` into a conftest or test module to apply it there (the comm-guard tests,
and `bench comm`'s, which installs each policy in the test's own process).
"""

from __future__ import annotations

import pytest

from slime_flashqla import comm_guard


@pytest.fixture(autouse=True)
def clean_comm_guard(monkeypatch):
    monkeypatch.delenv(comm_guard.ENV_VAR, raising=False)
    comm_guard.uninstall()
    comm_guard.reset_stats()
    yield
    comm_guard.uninstall()
    comm_guard.reset_stats()
