"""Policy names, the environment variable and their validation."""

from __future__ import annotations

import os

ENV_VAR = "SLIME_FLASHQLA_COMM_CHECK"

ALWAYS = "always"
WHITELIST = "whitelist"
FIRST_USE = "first-use"
OFF = "off"
POLICIES = (ALWAYS, WHITELIST, FIRST_USE, OFF)

# Steady state costs nothing but the wrapper, and the probe still runs where
# communicator buffers get allocated (docs/en/comm_guard.md has the numbers).
DEFAULT_POLICY = FIRST_USE


def resolve_policy(policy: str | None) -> str:
    """Return the policy to use: the argument, else $SLIME_FLASHQLA_COMM_CHECK, else the default."""
    source = "policy argument"
    if policy is None:
        policy = os.environ.get(ENV_VAR, "").strip()
        source = f"${ENV_VAR}"
        if not policy:
            return DEFAULT_POLICY
    if not isinstance(policy, str) or policy.strip().lower() not in POLICIES:
        raise ValueError(
            f"comm guard: {source} is {policy!r}; valid policies: {', '.join(POLICIES)} (default {DEFAULT_POLICY})"
        )
    return policy.strip().lower()
