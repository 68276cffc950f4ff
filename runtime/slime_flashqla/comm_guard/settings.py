"""The one check of an install's policy, threshold and probe: the comm guard's and the slime integration's."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass

from slime_flashqla.comm_guard import memory
from slime_flashqla.comm_guard.policy import BY_NAME, Policy, resolve_policy

DEFAULT_THRESHOLD_GB = 3.0  # slime's `free_GB < 3`
# No GPU holds a pebibyte: a larger threshold is a mistake (and 1e308 GiB overflows int()).
MAX_THRESHOLD_GB = 2**20


@dataclass(frozen=True)
class Settings:
    """A checked policy, threshold and probe."""

    policy: Policy
    threshold_gb: float
    threshold_bytes: int
    probe: Callable[[], int | None]

    @classmethod
    def checked(
        cls, policy: str | None = None, threshold_gb: float = DEFAULT_THRESHOLD_GB, probe: Callable | None = None
    ) -> Settings:
        """The settings these arguments ask for, or the ValueError/TypeError naming the first bad one."""
        resolved = BY_NAME[resolve_policy(policy)]
        if (
            isinstance(threshold_gb, bool)
            or not isinstance(threshold_gb, numbers.Real)
            or not math.isfinite(threshold_gb)
            or not 0 <= threshold_gb <= MAX_THRESHOLD_GB
        ):
            raise ValueError(
                f"comm guard: threshold_gb must be a number from 0 to {MAX_THRESHOLD_GB} (GiB), got {threshold_gb!r}"
            )
        if probe is not None and not callable(probe):
            raise TypeError(f"comm guard: probe must be a callable returning free bytes or None, got {probe!r}")
        threshold_bytes = int(threshold_gb * memory.GIB)
        return cls(resolved, float(threshold_gb), threshold_bytes, memory.probe if probe is None else probe)
