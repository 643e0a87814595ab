"""Redriven records: deduplicated per redrive, and their audit headers become the history."""

from __future__ import annotations

from headwater import record_headers as rh
from headwater.enricher.python_operator.dedupe import dedup_key
from headwater.enricher.python_operator.route import redrive_history


def key(headers: list) -> str:
    return dedup_key({"message_id": "m1", "headers": headers})


def test_a_redrive_is_checked_under_its_own_key_and_repeats_of_it_are_not():
    plain = [(rh.MESSAGE_ID, b"m1")]
    first = [*plain, (rh.REDRIVE_COUNT, b"1")]
    second = [*plain, (rh.REDRIVE_COUNT, b"2")]
    assert key(plain) == "m1"
    assert key(first) != key(plain)
    assert key(second) != key(first)
    assert key(list(first)) == key(first)
    # Spark hands headers over as rows with key/value.
    assert key([{"key": k, "value": v} for k, v in first]) == key(first)


def test_history_keeps_every_redrive_oldest_first():
    headers = [
        (rh.MESSAGE_ID, b"m1"),
        (rh.REDRIVE_BY, b"alice"),
        (rh.REDRIVE_AT_MS, b"1700000000000"),
        (rh.REDRIVE_REASON, b"normalizer fixed"),
        (rh.REDRIVE_BY, b"bob"),
        (rh.REDRIVE_AT_MS, b"1700000100000"),
        (rh.REDRIVE_REASON, b"master data added"),
        (rh.REDRIVE_COUNT, b"2"),
    ]
    history = redrive_history(headers)
    assert [(r.by, r.reason, r.redriven_time.ToMilliseconds()) for r in history] == [
        ("alice", "normalizer fixed", 1_700_000_000_000),
        ("bob", "master data added", 1_700_000_100_000),
    ]
    assert redrive_history([(rh.MESSAGE_ID, b"m1")]) == []
