"""Percentiles, spread and the per-request numbers a level is built from."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = ["percentile", "percentiles", "spread", "median"]

#: from this many values on, ``percentiles`` selects ranks (numpy) rather than sorting
_SELECT_FROM = 4096


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile (q in 0..100) of ``values``; None when empty."""
    return percentiles(values, (q,))[0]


def percentiles(values: Sequence[float], qs: Sequence[float]) -> list[float | None]:
    """``percentile(values, q)`` for each q, sorting once (a level's ITLs are one per token:
    each sort of them costs more than the rest of the level's arithmetic)."""
    if not values:
        return [None] * len(qs)
    if len(values) < _SELECT_FROM:
        xs: Sequence[float] | np.ndarray = sorted(values)
    else:  # a level's pooled ITLs: put just the ranks ``_at`` reads in place (O(n))
        n = len(values)
        ranks = sorted({min(math.floor((n - 1) * q / 100.0) + d, n - 1)
                        for q in qs for d in (0, 1)})
        xs = np.partition(np.asarray(values, dtype=float), ranks)
    return [_at(xs, q) for q in qs]


def _at(xs: Sequence[float] | np.ndarray, q: float) -> float:
    """The linear-interpolated q-th percentile of ``xs``, sorted at least at the two ranks
    it reads."""
    if len(xs) == 1:
        return float(xs[0])
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return float(xs[lo] + (xs[hi] - xs[lo]) * (pos - lo))


def median(values: Sequence[float]) -> float | None:
    return percentile(values, 50)


def spread(values: Sequence[float]) -> float:
    """(max - min) / median of round values; 0 for fewer than two rounds."""
    if len(values) < 2:
        return 0.0
    mid = median(values) or 0.0
    if mid == 0:
        return 0.0
    return (max(values) - min(values)) / mid
