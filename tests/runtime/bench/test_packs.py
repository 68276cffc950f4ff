"""The RL-like pack stream: seeded and reproducible, within its bounds, and varied the way RL steps are."""

from __future__ import annotations

import statistics

import pytest

from slime_flashqla.bench.packs import PackDistribution, PackError


def test_a_seed_names_the_same_packs_everywhere():
    # Fixed values: Python's Mersenne Twister gives this stream on every platform and version, so a
    # seed in a benchmark report names these very packs.
    assert PackDistribution(seed=0).packs(2) == [
        (2560, 371, 414, 472, 6631, 1038, 4070, 3400, 240),
        (11474, 4902, 3910, 287, 1602, 3086, 575, 322),
    ]
    assert PackDistribution(seed=7).packs(50) == PackDistribution(seed=7).packs(50)
    assert PackDistribution(seed=7).packs(5) != PackDistribution(seed=8).packs(5)
    assert PackDistribution(seed=3).packs(20)[:5] == PackDistribution(seed=3).packs(5)


@pytest.mark.parametrize("dist", ["lognormal", "pareto"])
def test_packs_stay_in_bounds_and_vary_like_rl_steps(dist):
    shape = PackDistribution(max_tokens=32768, min_len=32, median_len=1024, dist=dist, seed=1)
    packs = shape.packs(300)
    totals = [sum(p) for p in packs]
    lengths = [n for p in packs for n in p]
    assert max(totals) <= 32768 and min(lengths) >= 32
    assert min(totals) >= 0.25 * 32768 - max(lengths)  # a pack closes only when rollouts stop fitting
    assert len(set(totals)) > 250  # the token count changes from step to step
    assert len({len(p) for p in packs}) > 10  # and so does the number of sequences
    median = statistics.median(lengths)
    assert 0.4 * 1024 < median < 2.5 * 1024
    assert max(lengths) > 8 * median  # a long tail, up to the pack budget


def test_a_rollout_longer_than_the_budget_is_cut_to_it():
    packs = PackDistribution(max_tokens=512, min_len=32, median_len=500, sigma=2.0, min_fill=1.0, seed=0).packs(50)
    assert all(sum(p) <= 512 for p in packs)
    assert any(p == (512,) for p in packs)


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"dist": "zipf"}, "unknown pack distribution"),
        ({"min_len": 0}, ">= 1 token"),
        ({"max_tokens": 16, "min_len": 32, "median_len": 32}, "below the shortest"),
        ({"median_len": 10}, "between --min-len"),
        ({"min_fill": 0}, "--min-fill"),
        ({"sigma": 0}, "sigma and alpha"),
    ],
)
def test_a_distribution_that_cannot_be_drawn_is_refused_with_the_reason(kwargs, words):
    with pytest.raises(PackError, match=words):
        PackDistribution(**kwargs)
