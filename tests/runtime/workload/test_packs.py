"""The RL-like pack stream: seeded and reproducible, within its bounds, and varied the way RL steps are."""

from __future__ import annotations

import statistics

import pytest

from slime_flashqla.workload.packs import MAX_PACK_SEQUENCES, PackDistribution, PackError, derived_lengths


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
        ({"sigma": 0}, "--sigma"),
        ({"sigma": float("inf")}, "--sigma"),
        ({"sigma": float("nan")}, "--sigma"),
        ({"sigma": 11.0}, "--sigma"),
        ({"alpha": 1e-300, "dist": "pareto"}, "--alpha"),
        ({"alpha": float("nan")}, "--alpha"),
        ({"alpha": float("inf")}, "--alpha"),
        ({"min_fill": float("nan")}, "--min-fill"),
        ({"max_tokens": 2**31}, "2147483647"),
        ({"max_tokens": 2**31 - 1, "median_len": 1024}, "raise --median-len"),
    ],
)
def test_a_distribution_that_cannot_be_drawn_is_refused_with_the_reason(kwargs, words):
    with pytest.raises(PackError, match=words):
        PackDistribution(**kwargs)


@pytest.mark.parametrize(
    ("given", "derived"),
    [
        ({"max_tokens": 32768}, (32, 1024)),  # the documented defaults
        ({"max_tokens": 256}, (32, 32)),  # a CPU-sized budget: the median follows it down
        ({"max_tokens": 4096}, (32, 512)),
        ({"max_tokens": 16}, (16, 16)),  # even the shortest sequence follows a tiny budget
        ({"max_tokens": 256, "min_len": 100}, (100, 100)),
        ({"max_tokens": 256, "median_len": 200}, (32, 200)),
        ({"max_tokens": 256, "min_len": 8, "median_len": 1024}, (8, 1024)),  # given: kept, refused later
    ],
)
def test_defaults_the_user_did_not_set_are_derived_from_the_budget(given, derived):
    assert derived_lengths(**given) == derived


def test_a_given_median_that_does_not_fit_is_still_refused():
    min_len, median = derived_lengths(256, median_len=1024)
    with pytest.raises(PackError, match=r"between --min-len 32 and --max-tokens 256"):
        PackDistribution(max_tokens=256, min_len=min_len, median_len=median)


@pytest.mark.parametrize("dist", ["lognormal", "pareto"])
def test_the_widest_accepted_distributions_draw_without_overflow(dist):
    # The bounds are where drawing stops being finite: at them a pack is still drawn, quickly.
    shape = PackDistribution(max_tokens=2**31 - 1, median_len=2**31 // MAX_PACK_SEQUENCES + 1, sigma=10.0,
                             alpha=0.1, dist=dist, seed=0)  # fmt: skip
    packs = shape.packs(20)
    assert all(0 < sum(p) <= 2**31 - 1 for p in packs)
