"""bench.timing's CPU-side helpers: the cProfile rows the GPU tools print."""

from __future__ import annotations

import cProfile
import pstats
import time

import pytest

from slime_flashqla.bench.timing import cprofile_rows


def _slow(seconds: float) -> None:
    time.sleep(seconds)


def _outer() -> None:
    for _ in range(3):
        _slow(0.01)


def test_cprofile_rows_rank_by_time_and_divide_by_the_steps():
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(2):
        _outer()
    profiler.disable()
    stats = pstats.Stats(profiler).stats

    cumulative = cprofile_rows(stats, "cumulative", 2, per=2)
    names = [row[0] for row in cumulative]
    assert names[0].endswith("(_outer)") and names[0].startswith("test_timing.py:")
    _, calls, own, total = cumulative[0]
    assert calls == 1  # called twice over two steps
    assert total == pytest.approx(30, abs=15) and own < 1  # ms per step: three 10 ms sleeps, spent below it

    own_rows = cprofile_rows(stats, "own", 1)
    assert "sleep" in own_rows[0][0] and own_rows[0][1] == 6 and own_rows[0][2] >= 50


def test_cprofile_rows_refuse_an_unknown_order():
    with pytest.raises(KeyError):
        cprofile_rows({}, "total", 3)
