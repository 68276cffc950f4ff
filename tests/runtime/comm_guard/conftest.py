"""Every comm-guard test starts and ends with torch.distributed unpatched and the counters at zero."""

from __future__ import annotations

from helpers.comm_guard_state import clean_comm_guard  # noqa: F401  (autouse fixture)
