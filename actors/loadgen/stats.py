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
        xs = sorted(values)
        return [_at(xs, q) for q in qs]
    # a level's pooled ITLs (one per token): select the ranks needed (O(n)) instead of a
    # full sort; the same interpolation, on the same two neighbours, as _at
    arr = np.asarray(values, dtype=float)
    n = len(arr)
    pos = [(n - 1) * q / 100.0 for q in qs]
    ranks = sorted({r for p in pos for r in (math.floor(p), min(math.floor(p) + 1, n - 1))})
    part = np.partition(arr, ranks)  # each rank in ``ranks`` holds its sorted value
    at = {r: float(part[r]) for r in ranks}
    out: list[float | None] = []
    for p in pos:
        lo = math.floor(p)
        hi = min(lo + 1, n - 1)
        out.append(float(at[lo] + (at[hi] - at[lo]) * (p - lo)))
    return out


def _at(xs: list[float], q: float) -> float:
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
