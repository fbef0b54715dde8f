"""Percentiles, spread and the per-request numbers a level is built from."""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["percentile", "spread", "median"]


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile (q in 0..100) of ``values``; None when empty."""
    if not values:
        return None
    xs = sorted(values)
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
