"""The one percentile convention of every figure Headwater prints (dev stack, benchmarks).

A percentile is the standard library's "inclusive" quantile
(``statistics.quantiles(values, n=100, method="inclusive")``): linear interpolation between
the two nearest ranks over the sorted sample, the minimum at q=0 and the maximum at q=1 (R
type 7, numpy's and spreadsheets' default). It needs no assumption about a population
beyond the sample, and the p99 of 100 samples is not simply their maximum, as a
nearest-rank p99 would be. ``quantile`` computes the same value for any q in [0, 1], where
``statistics.quantiles`` gives only the cut points of n equal groups; a test checks that the
two agree.

Prometheus quantiles (``histogram_quantile()`` over buckets) are a different statistic,
computed where they are read (``headwater.ops.scrape``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable


def quantile(values: Iterable[float], q: float) -> float | None:
    """Return the ``q`` quantile (0 <= q <= 1) of ``values``; None when there are none.

    Raises:
        ValueError: ``q`` is outside [0, 1].
    """
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile {q!r}: use a value from 0 to 1")
    ordered = sorted(values)
    if not ordered:
        return None
    position = q * (len(ordered) - 1)
    below = math.floor(position)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (position - below)


def percentile(values: Iterable[float], p: float, empty: float = 0.0) -> float:
    """Return the ``p``-th percentile (0 <= p <= 100) of ``values``; ``empty`` when none."""
    found = quantile(values, p / 100)
    return empty if found is None else found
