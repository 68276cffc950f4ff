"""Head configurations of one GDN layer shard: one type and one `Hk/Hv` grammar for warmup, bench and the models."""

from __future__ import annotations

import re
from dataclasses import dataclass

_HK_HV = re.compile(r"^(\d+)/(\d+)$")
# Value heads of one layer shard: 16x the largest model served (Qwen3.5-397B, 64). More is a typo
# whose inputs fail to allocate after the run started, not a configuration.
MAX_HEADS = 1024


class HeadConfigError(ValueError):
    """A head configuration that does not parse or whose Hk does not divide Hv; the message says which."""


@dataclass(frozen=True, order=True)
class HeadConfig:
    """Key and value head counts of one GDN layer on one rank (Hk divides Hv)."""

    key_heads: int
    value_heads: int

    @property
    def label(self) -> str:
        """`Hk/Hv`, as the command lines write it."""
        return f"{self.key_heads}/{self.value_heads}"

    @property
    def group(self) -> int:
        """Value heads per key head."""
        return self.value_heads // self.key_heads

    def __str__(self) -> str:
        return self.label


def checked_heads(key_heads: int, value_heads: int, what: str) -> HeadConfig:
    """HeadConfig(key_heads, value_heads), or a HeadConfigError naming `what` unless Hk divides Hv <= MAX_HEADS."""
    if key_heads <= 0 or value_heads <= 0 or value_heads % key_heads:
        raise HeadConfigError(f"{what}: Hv must be a positive multiple of Hk, got {key_heads}/{value_heads}")
    if value_heads > MAX_HEADS:
        raise HeadConfigError(f"{what}: at most {MAX_HEADS} value heads per layer shard, got {key_heads}/{value_heads}")
    return HeadConfig(key_heads, value_heads)


def parse_head_config(text: str) -> HeadConfig:
    """Parse one `Hk/Hv` (key heads / value heads, for example 16/32), checking Hk divides Hv."""
    match = _HK_HV.match(text.strip())
    if match is None:
        raise HeadConfigError(f"bad head config {text!r}: write key heads / value heads as Hk/Hv, e.g. 16/32")
    return checked_heads(int(match.group(1)), int(match.group(2)), f"bad head config {text!r}")


def parse_heads(text: str) -> list[HeadConfig]:
    """Parse a comma list of `Hk/Hv`; duplicates are dropped, order kept."""
    heads = [parse_head_config(item) for item in text.split(",") if item.strip()]
    if not heads:
        raise HeadConfigError(f"no head configs in {text!r}: give a comma list such as 16/32,8/16")
    return list(dict.fromkeys(heads))
