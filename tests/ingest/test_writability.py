"""The write health's pieces without a broker: what it counts, names and decides.

On a real cluster: tests/ingest/test_cluster_faults.py (two of three brokers down turns the
write health NOT_SERVING with the silent brokers named; a leader kill is told in one line).
"""

from __future__ import annotations

import time

import pytest

from headwater.ingest import writability
from headwater.ingest.writability import (
    PartitionState,
    WriteOutcomes,
    moved_leaders,
    unwritable_reason,
)

TOPIC = "ingest.telemetry.v1"


def part(p: int, leader: int = 1, in_sync: int = 3, topic: str = TOPIC) -> PartitionState:
    return PartitionState(topic, p, leader, replicas=3, in_sync=in_sync, min_in_sync=2)


def test_a_partition_needs_a_leader_and_min_in_sync_replicas():
    assert part(0).problem == ""
    assert part(0, in_sync=2).problem == ""
    assert part(0, in_sync=1).problem == "1 in-sync replica(s), min.insync.replicas=2"
    assert part(0, leader=-1).problem == "no leader"
    reason = unwritable_reason([part(0, in_sync=1), part(1), part(2, in_sync=1), part(3, -1)])
    assert reason == (
        f"{TOPIC}[0], {TOPIC}[2]: 1 in-sync replica(s), min.insync.replicas=2; "
        f"{TOPIC}[3]: no leader"
    )
    assert unwritable_reason([part(0), part(1)]) == ""


def test_moved_leaders_name_each_partition_once_and_ignore_new_ones():
    before = {"t[0]": 1, "t[1]": 2, "t[2]": -1}
    now = {"t[0]": 3, "t[1]": 2, "t[2]": 1, "t[3]": 2}
    assert moved_leaders(before, now) == ["t[0]: node 1 -> node 3"]
    assert moved_leaders({"t[0]": 1}, {"t[0]": -1}) == ["t[0]: node 1 -> none"]
    assert moved_leaders({}, now) == []


def test_writes_are_failing_only_after_failures_without_any_ack():
    outcomes = WriteOutcomes()
    now = time.monotonic()
    later = now + writability.FAILING_AFTER_S + 1
    assert outcomes.failing(later) == ""  # quiet is not failing: no traffic, no verdict
    outcomes.failed()
    assert outcomes.failing(now) == ""  # not for long enough yet
    assert "none was acknowledged" in outcomes.failing(later)
    outcomes.succeeded()  # one record taken (another partition during an election)
    assert outcomes.failing(later) == ""


@pytest.mark.parametrize(
    ("states", "under", "offline", "unwritable"),
    [
        ([part(0), part(1)], 0, 0, {TOPIC: 0}),
        ([part(0, in_sync=2), part(1, in_sync=1), part(0, topic="other")], 2, 0, {TOPIC: 1}),
        ([part(0, leader=-1, in_sync=0), part(0, -1, 0, topic="other")], 2, 2, {TOPIC: 1}),
    ],
)
def test_gauges_count_the_whole_cluster_and_the_ingest_topics_apart(
    states, under, offline, unwritable
):
    from opentelemetry.sdk.metrics import MeterProvider

    gauges = writability.ClusterGauges(MeterProvider().get_meter("test"))
    gauges.record(states, {TOPIC})
    assert (gauges.under_replicated, gauges.offline, gauges.unwritable) == (
        under,
        offline,
        unwritable,
    )
