"""The policies: their names, the environment variable, and what each decides for a call."""

from __future__ import annotations

import os
from dataclasses import dataclass

ENV_VAR = "SLIME_FLASHQLA_COMM_CHECK"

ALWAYS = "always"
WHITELIST = "whitelist"
FIRST_USE = "first-use"
OFF = "off"
POLICIES = (ALWAYS, WHITELIST, FIRST_USE, OFF)

# Steady state costs nothing but the wrapper, and the probe still runs where
# communicator buffers get allocated (docs/en/comm_guard.md has the numbers).
DEFAULT_POLICY = FIRST_USE


@dataclass(frozen=True)
class Policy:
    """One policy: its name, the integer the wrappers compare on every call, and its decision."""

    name: str
    code: int

    @property
    def first_use(self) -> bool:
        """Whether the decision depends on a call being the first of its key since the last re-arm."""
        return self.name == FIRST_USE

    def checks(self, skippable: bool, first_time: bool) -> bool:
        """Whether a call probes: `skippable` when slime's list skips it, `first_time` when its key is new."""
        if self.name == ALWAYS:
            return True
        if self.name == WHITELIST:
            return not skippable
        return self.name == FIRST_USE and first_time


# The codes are small integers: a wrapper compares one on every call, cheaper than a string.
BY_NAME = {name: Policy(name, code) for code, name in enumerate((OFF, ALWAYS, WHITELIST, FIRST_USE))}
BY_CODE = tuple(sorted(BY_NAME.values(), key=lambda p: p.code))


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
