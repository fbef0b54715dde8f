"""Percentile, median and round-spread maths of the load generator."""

from __future__ import annotations

import random

import numpy as np
import pytest

from actors.loadgen.stats import median, percentile, spread


def test_empty_and_single():
    assert percentile([], 50) is None and median([]) is None
    assert percentile([3.0], 0) == percentile([3.0], 99) == 3.0


def test_linear_interpolation_between_ranks():
    xs = [1.0, 2.0, 3.0, 4.0]
    assert percentile(xs, 0) == 1.0 and percentile(xs, 100) == 4.0
    assert percentile(xs, 50) == 2.5
    assert percentile(xs, 90) == pytest.approx(3.7)
    assert median([5.0, 1.0, 3.0]) == 3.0  # unsorted input


@pytest.mark.parametrize("q", [1, 10, 50, 90, 99, 99.9])
def test_matches_numpy_linear(q: float):
    rng = random.Random(q)
    xs = [rng.expovariate(1.0) for _ in range(1001)]
    assert percentile(xs, q) == pytest.approx(float(np.percentile(xs, q)), rel=1e-12)


def test_spread_is_range_over_median():
    assert spread([100.0, 104.0, 98.0]) == pytest.approx(6 / 100)
    assert spread([10.0]) == 0.0 and spread([]) == 0.0
    assert spread([0.0, 0.0]) == 0.0


@pytest.mark.parametrize("n", [4095, 4096, 50_000])
def test_selecting_ranks_gives_exactly_what_sorting_gives(n: int):
    """From ``_SELECT_FROM`` values on, ``percentiles`` selects the ranks it needs instead
    of sorting (a level's pooled ITLs are one per token); the figures are bit for bit the
    sorted path's, ties and the extremes included."""
    from actors.loadgen import stats

    rng = random.Random(n)
    xs = [rng.expovariate(1.0) for _ in range(n)] + [1.0] * 7 + [0.0, 1e9]
    qs = (0, 1, 50, 90, 99, 99.9, 100)
    ranked = sorted(xs)
    assert stats.percentiles(xs, qs) == [stats._at(ranked, q) for q in qs]
    assert stats.percentiles([2.5] * n, (50, 99)) == [2.5, 2.5]
