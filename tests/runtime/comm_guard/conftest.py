"""Every comm-guard test starts and ends with torch.distributed unpatched and the counters at zero."""

from __future__ import annotations

import pytest

from slime_flashqla import comm_guard


@pytest.fixture(autouse=True)
def _clean_guard(monkeypatch):
    monkeypatch.delenv(comm_guard.ENV_VAR, raising=False)
    comm_guard.uninstall()
    comm_guard.reset_stats()
    yield
    comm_guard.uninstall()
    comm_guard.reset_stats()
