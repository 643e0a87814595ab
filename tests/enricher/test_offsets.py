"""Admission control and gap checks of the Kafka source (pure functions)."""

from __future__ import annotations

import pytest

from headwater.enricher.errors import OffsetGapError
from headwater.enricher.kafka_offsets import admit, check_range, flatten, nest


def test_nest_and_flatten_round_trip() -> None:
    flat = {("a", 0): 5, ("a", 1): 7, ("b", 0): 0}
    assert flatten(nest(flat)) == flat
    assert nest(flat) == {"a": {"0": 5, "1": 7}, "b": {"0": 0}}


def test_admit_without_limit_reads_everything() -> None:
    assert admit({("a", 0): 3}, {("a", 0): 10}, None) == {("a", 0): 10}


def test_admit_shares_the_budget_fairly() -> None:
    start = {("a", 0): 0, ("a", 1): 0, ("a", 2): 0}
    available = {("a", 0): 1000, ("a", 1): 2, ("a", 2): 1000}
    end = admit(start, available, 100)
    assert sum(end.values()) == 100
    assert end[("a", 1)] == 2  # the short partition is drained
    assert abs(end[("a", 0)] - end[("a", 2)]) <= 1  # the rest is split evenly


def test_admit_never_moves_backwards() -> None:
    assert admit({("a", 0): 10}, {("a", 0): 10}, 5) == {("a", 0): 10}


def test_check_range_fails_loudly_on_deleted_and_beyond() -> None:
    check_range("t", 0, 5, 0, 10)
    with pytest.raises(OffsetGapError, match="deleted") as deleted:
        check_range("t", 0, 5, 8, 10)
    assert "HEADWATER_ENRICHER_STARTING_OFFSETS" in str(deleted.value)
    with pytest.raises(OffsetGapError, match="recreated or truncated"):
        check_range("t", 0, 50, 0, 10)
