"""The enricher benchmark's recovery phase: when a released query counts as caught up."""

from __future__ import annotations

import math
import time

import pytest

from headwater_dev.bench.enricher import recovery
from headwater_dev.bench.enricher.recovery import recovery_time, target_line
from tests.support.latency_spans import at_ten_a_second

RELEASED = 1_000_000.0


def _completions(spans: list[tuple[float, float, float]]) -> tuple[list[float], list[float]]:
    """Return (seen_ms, latency_ms): 10 a second over each (from_s, to_s, latency_ms)."""
    return at_ten_a_second(RELEASED, spans)


def test_recovered_when_drained_and_the_window_p99_stays_under_the_bound() -> None:
    # The backlog's records come out 60 s late for 20 s, then fresh ones at 800 ms.
    seen, latency = _completions([(2, 20, 60_000), (20, 60, 800)])
    drained = 180  # the 180 backlog completions
    got = recovery_time(seen, latency, RELEASED, RELEASED + 60_000, drained)
    assert got.drained_s == 19.9
    # The 5 s window holds a 60 s latency until it has slid past the 20 s mark.
    assert got.recovered_s == 25.0
    assert dict(got.p99_by_step)[24.5] > recovery.P99_BOUND_MS
    assert dict(got.p99_by_step)[1.0] == math.inf  # nothing came out yet


def test_not_recovered_while_the_backlog_is_not_drained() -> None:
    # Every completion is fast, but fewer than the backlog held came out.
    seen, latency = _completions([(0, 60, 500)])
    got = recovery_time(seen, latency, RELEASED, RELEASED + 60_000, len(seen) + 1)
    assert (got.drained_s, got.recovered_s) == (None, None)
    assert max(p for _, p in got.p99_by_step[10:]) == 500


def test_not_recovered_when_the_p99_goes_over_the_bound_again_or_is_not_held() -> None:
    relapse = _completions([(0, 10, 500), (10, 12, 3_000), (12, 60, 500)])
    got = recovery_time(*relapse, RELEASED, RELEASED + 60_000, 10)
    assert got.recovered_s == 17.0  # the last window holding a 3 s latency ends at 16.5 s
    # Under the bound only for the last 10 s of the observation: less than HOLD_S.
    late = _completions([(0, 50, 3_000), (50, 60, 500)])
    assert recovery_time(*late, RELEASED, RELEASED + 60_000, 10).recovered_s is None
    # A silent window (the query stalled) is not under the bound.
    stalled = _completions([(0, 10, 500), (30, 60, 500)])
    assert recovery_time(*stalled, RELEASED, RELEASED + 60_000, 10).recovered_s == 30.0


def test_the_target_line_says_met_or_missed() -> None:
    result = {
        "devices": 1000,
        "backlog_s": 60.0,
        "offered_rate_msgs_per_s": 5000,
        "drained_s": 21.0,
        "recovered_s": 27.5,
    }
    assert target_line(result).endswith("27.5 s (<= 30 s; drained after 21.0 s) met")
    assert target_line(result | {"recovered_s": 31.0}).endswith("MISSED")
    missed = target_line(result | {"recovered_s": None})
    assert "not within the observation" in missed and missed.endswith("MISSED")


def test_a_negative_backlog_is_refused() -> None:
    from headwater_dev.bench.enricher.query import main

    with pytest.raises(SystemExit) as refused:
        main(["--backlog-s", "-1"])
    assert refused.value.code == 2


def test_the_offered_load_knows_what_it_had_sent_by_a_time(kafka_bootstrap, topic_factory):
    """OfferedLoad: paced records with unique ids, and the count by a moment (the release's)."""
    from headwater import record_headers as rh
    from headwater.kafka.read import read_topic
    from headwater_dev.bench.enricher.recovery import OfferedLoad

    topic = topic_factory("offered", partitions=2)
    load = OfferedLoad(kafka_bootstrap, topic, 400, 10, "t")
    load.start()
    try:
        at = time.time() + 1.0
        by_then = load.sent_by(at)  # waits for the slice that ends after ``at``
        assert load.marks[-1][0] >= at
        assert 200 <= by_then <= 800  # ~400 a second, paced, for ~1 s
    finally:
        load.stop_flag = True
        load.join(10)
    records = read_topic(kafka_bootstrap, topic)
    ids = [dict(m.headers() or [])[rh.MESSAGE_ID] for m in records]
    assert len(ids) == len(set(ids)) == load.sent >= by_then
