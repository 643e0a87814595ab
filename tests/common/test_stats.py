"""The one percentile convention is the standard library's inclusive quantile."""

from __future__ import annotations

import random
import statistics

import pytest

from headwater.runtime.stats import percentile, quantile


def test_quantile_agrees_with_statistics_quantiles_inclusive() -> None:
    rng = random.Random(7)
    for size in (2, 3, 10, 99, 100, 101, 1000):
        values = [rng.expovariate(1.0) for _ in range(size)]
        cuts = statistics.quantiles(values, n=100, method="inclusive")
        for p in range(1, 100):
            assert quantile(values, p / 100) == pytest.approx(cuts[p - 1], rel=1e-12, abs=1e-12)
            assert percentile(values, p) == pytest.approx(cuts[p - 1], rel=1e-12, abs=1e-12)


def test_ends_and_edges() -> None:
    assert quantile([], 0.5) is None
    assert percentile([], 99) == 0.0
    assert percentile([], 99, empty=-1.0) == -1.0
    assert quantile([4.0], 0.99) == 4.0
    assert quantile([3.0, 1.0, 2.0], 0.0) == 1.0
    assert quantile([3.0, 1.0, 2.0], 1.0) == 3.0
    # Not nearest rank: the p99 of 1..100 lies between the two top samples.
    assert quantile([float(i) for i in range(1, 101)], 0.99) == pytest.approx(99.01)
    with pytest.raises(ValueError):
        quantile([1.0], 1.5)
