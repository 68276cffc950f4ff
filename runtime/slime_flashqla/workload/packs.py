"""A seeded, RL-like stream of packed batches: what a slime training step hands the GDN layers.

Every RL step packs a different set of rollouts: response lengths are long-tailed (most a
few hundred tokens, some near the budget), so the number of sequences and the total
token count change from step to step. A pack here is drawn the way a packer fills a
micro-batch: a token budget for the step, then rollouts of random length while they fit; a
rollout that does not fit is left for a later pack, and the pack closes after MISSES such
rollouts in a row (the first is cut to the budget, as a rollout longer than the budget is).

Drawn with Python's `random.Random`, whose Mersenne Twister stream is the same on every
platform and Python version, so a seed names the same packs everywhere.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from slime_flashqla.workload.lengths import MAX_TOKENS

DISTRIBUTIONS = ("lognormal", "pareto")
MISSES = 3  # rollouts in a row that do not fit before a pack is closed
DEFAULT_MIN_LEN = 32
DEFAULT_MEDIAN_LEN = 1024
# Rollouts are drawn one by one in Python: a budget above this many median sequences would take
# minutes to pack per step (real RL packs hold tens to hundreds).
MAX_PACK_SEQUENCES = 4096
# Where drawing stays finite: exp() of a wider log-normal, or a pareto tail index below 0.1
# raised to its power, overflows a float.
MAX_SIGMA = 10.0
MIN_ALPHA = 0.1


def derived_lengths(max_tokens: int, min_len: int | None = None, median_len: int | None = None) -> tuple[int, int]:
    """(min_len, median_len): those given, else defaults that fit `max_tokens` (32 and 1024 at 32768 and up)."""
    if min_len is None:
        min_len = min(DEFAULT_MIN_LEN, max_tokens)
    if median_len is None:
        # An eighth of the budget, as `warmup`'s stream sample takes it, between min_len and 1024.
        median_len = min(DEFAULT_MEDIAN_LEN, max(min_len, max_tokens // 8))
    return min_len, median_len


class PackError(ValueError):
    """A pack distribution that cannot be drawn from."""


@dataclass(frozen=True)
class PackDistribution:
    """Sequence lengths and pack sizes of an RL-like stream; `packs(n)` draws n packs."""

    max_tokens: int = 32768  # the pack budget's upper end: no pack holds more
    min_len: int = DEFAULT_MIN_LEN  # the shortest sequence (a few dozen tokens: a short answer)
    median_len: int = DEFAULT_MEDIAN_LEN  # the typical sequence
    sigma: float = 1.2  # log-normal spread: larger = longer tail (ignored by pareto)
    alpha: float = 1.2  # pareto tail index: smaller = longer tail (ignored by lognormal)
    min_fill: float = 0.25  # each step's budget is uniform in [min_fill, 1] x max_tokens
    dist: str = "lognormal"
    seed: int = 0

    def __post_init__(self) -> None:
        if self.dist not in DISTRIBUTIONS:
            raise PackError(f"unknown pack distribution {self.dist!r}; choose from {', '.join(DISTRIBUTIONS)}")
        if self.min_len < 1:
            raise PackError(f"the shortest sequence must be >= 1 token, got {self.min_len}")
        if self.max_tokens > MAX_TOKENS:
            raise PackError(f"--max-tokens must be <= {MAX_TOKENS} (cu_seqlens are int32), got {self.max_tokens}")
        if self.max_tokens < self.min_len:
            raise PackError(f"--max-tokens {self.max_tokens} is below the shortest sequence ({self.min_len} tokens)")
        if not self.min_len <= self.median_len <= self.max_tokens:
            raise PackError(
                f"the median sequence ({self.median_len}) must lie between --min-len {self.min_len} "
                f"and --max-tokens {self.max_tokens}"
            )
        if self.max_tokens > MAX_PACK_SEQUENCES * self.median_len:
            raise PackError(
                f"--max-tokens {self.max_tokens} is more than {MAX_PACK_SEQUENCES} x the median sequence "
                f"({self.median_len}): packs of thousands of sequences; raise --median-len"
            )
        # `not a <= x` (rather than `x < a`) also refuses nan.
        if not 0 < self.min_fill <= 1:
            raise PackError(f"--min-fill must be in (0, 1], got {self.min_fill}")
        if not 0 < self.sigma <= MAX_SIGMA:
            raise PackError(f"--sigma must be in (0, {MAX_SIGMA:g}], got {self.sigma}")
        if not (self.alpha >= MIN_ALPHA and math.isfinite(self.alpha)):
            raise PackError(f"--alpha must be a finite number >= {MIN_ALPHA:g}, got {self.alpha}")

    def _length(self, rng: random.Random) -> int:
        if self.dist == "lognormal":
            value = rng.lognormvariate(math.log(self.median_len), self.sigma)
        else:  # pareto with its median at median_len: x_m * 2**(1/alpha) = median
            value = self.median_len / 2 ** (1 / self.alpha) * rng.paretovariate(self.alpha)
        return min(self.max_tokens, max(self.min_len, round(value)))

    def _pack(self, rng: random.Random) -> tuple[int, ...]:
        low = max(self.min_len, math.ceil(self.min_fill * self.max_tokens))
        budget = rng.randint(low, self.max_tokens)
        lengths: list[int] = []
        total = misses = 0
        while total < budget and misses < MISSES:
            length = self._length(rng)
            if not lengths:
                length = min(length, budget)
            elif total + length > budget:
                misses += 1
                continue
            lengths.append(length)
            total += length
            misses = 0
        return tuple(lengths)

    def packs(self, count: int) -> list[tuple[int, ...]]:
        """The first `count` packs of this seed's stream (each a tuple of sequence lengths)."""
        rng = random.Random(self.seed)
        return [self._pack(rng) for _ in range(count)]
