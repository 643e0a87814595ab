"""The spool on a real SQLite file: ids, sequences, limits and policies, restarts, metrics."""

from __future__ import annotations

import time
import uuid

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from headwater.gateway.metrics import GatewayMetrics
from headwater.gateway.spool import (
    NewMessage,
    Spool,
    SpoolFullError,
    SpoolLimits,
    SpoolLockedError,
)
from headwater.ids import timestamp_ms, uuid7
from headwater.proto.device.v1 import device_message_pb2

PAYLOAD = b'{"temp_c": 21.5}'
CT = "application/vnd.acme.telemetry.v1+json"


def envelope_of(
    spool: Spool, endpoint: str = "telemetry"
) -> list[device_message_pb2.DeviceMessage]:
    return [
        device_message_pb2.DeviceMessage.FromString(p.envelope) for p in spool.due(endpoint, 10_000)
    ]


def test_ids_are_uuid7_and_strictly_increasing_within_a_millisecond():
    before = int(time.time() * 1000)
    ids = [uuid7() for _ in range(5000)]  # far more than one per millisecond
    after = int(time.time() * 1000)
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert all(uuid.UUID(i).version == 7 and uuid.UUID(i).variant == uuid.RFC_4122 for i in ids)
    assert all(str(uuid.UUID(i)) == i for i in ids)  # the canonical text form
    # Over 4096 in one millisecond borrows the next: never more than a few ms ahead.
    assert before <= timestamp_ms(ids[0]) and timestamp_ms(ids[-1]) <= after + 2
    # A clock step backwards never makes an id sort before the last one.
    assert uuid7(before - 60_000) > ids[-1]


def test_spooled_ids_follow_enqueue_order_and_carry_the_enqueue_time(tmp_path):
    with Spool(tmp_path / "s.db") as spool:
        started = int(time.time() * 1000)
        ids = []
        for _ in range(20):
            ids.append(spool.enqueue("telemetry", "acme-1", CT, PAYLOAD).message_id)
            time.sleep(0.002)
        assert ids == sorted(ids)
        assert started <= timestamp_ms(ids[0]) <= timestamp_ms(ids[-1]) <= time.time() * 1000


def test_enqueue_assigns_id_and_per_device_sequence_that_survive_a_restart(tmp_path):
    path = tmp_path / "spool.db"
    with Spool(path) as spool:
        first = [spool.enqueue("telemetry", "acme-1", CT, PAYLOAD).message_id for _ in range(3)]
        spool.enqueue("telemetry", "acme-2", CT, PAYLOAD)
        spool.delivered([p.seq for p in spool.due("telemetry", 10)])  # sent and gone
    with Spool(path) as spool:
        again = spool.enqueue("telemetry", "acme-1", CT, PAYLOAD).message
        alarm = spool.enqueue("alarms", "acme-1", CT, PAYLOAD).message
        # Sequences continue where they were, even though the outbox was empty.
        assert (again.sequence, alarm.sequence) == (4, 5)
        assert again.message_id > first[-1]
        assert [(m.device_id, m.sequence) for m in envelope_of(spool)] == [("acme-1", 4)]
        (spooled_alarm,) = envelope_of(spool, "alarms")
        assert spooled_alarm == alarm and alarm.payload == PAYLOAD and alarm.content_type == CT
        assert spool.stats().depth == spool.depth == 2


def test_refuse_policy_raises_counts_and_keeps_what_it_has(tmp_path):
    limits = SpoolLimits(max_bytes=600, when_full="refuse")
    with Spool(tmp_path / "s.db", limits) as spool:
        kept = []
        with pytest.raises(SpoolFullError, match="is full") as full:
            while True:
                kept.append(spool.enqueue("telemetry", "acme-1", CT, b"x" * 100).message_id)
        assert full.value.retriable and full.value.max_bytes == 600
        with pytest.raises(SpoolFullError):
            spool.enqueue("telemetry", "acme-1", CT, b"x" * 100)
        stats = spool.stats()
        assert stats.counters["refused"] == 2 and "dropped_oldest" not in stats.counters
        assert [m.message_id for m in envelope_of(spool)] == kept
        # A refused enqueue used no sequence number.
        spool.delivered([p.seq for p in spool.due("telemetry", 1)])
        spool.enqueue("telemetry", "acme-1", CT, b"x" * 100)
        assert envelope_of(spool)[-1].sequence == len(kept) + 1


def test_drop_oldest_policy_makes_room_counts_and_reports_every_drop(tmp_path):
    limits = SpoolLimits(max_bytes=1000, when_full="drop_oldest")
    with Spool(tmp_path / "s.db", limits) as spool:
        results = [spool.enqueue("telemetry", "acme-1", CT, b"x" * 100) for _ in range(20)]
        ids = [r.message_id for r in results]
        left = [m.message_id for m in envelope_of(spool)]
        assert left == ids[-len(left) :]
        assert spool.stats().bytes <= 1000
        # Every dropped id was handed back to the enqueue that pushed it out, once.
        reported = [d for r in results for d in r.dropped]
        assert reported == ids[: len(ids) - len(left)]
        assert spool.stats().counters["dropped_oldest"] == len(reported) > 0


def test_a_message_bigger_than_the_spool_is_refused_under_any_policy(tmp_path):
    with (
        Spool(tmp_path / "s.db", SpoolLimits(max_bytes=100)) as spool,
        pytest.raises(SpoolFullError, match="larger than the whole spool") as full,
    ):
        spool.enqueue("telemetry", "acme-1", CT, b"x" * 200)
    assert not full.value.retriable


def test_old_messages_expire_and_are_counted(tmp_path):
    with Spool(tmp_path / "s.db", SpoolLimits(max_age_s=0.001)) as spool:
        spool.enqueue("telemetry", "acme-1", CT, PAYLOAD, device_time_ms=1)
        time.sleep(0.01)
        result = spool.enqueue("telemetry", "acme-1", CT, PAYLOAD)
        assert result.expired == 1
        assert spool.stats().depth == 1
        assert spool.stats().counters["expired"] == 1


def test_retry_later_reject_and_delivered(tmp_path):
    with Spool(tmp_path / "s.db") as spool:
        for _ in range(3):
            spool.enqueue("telemetry", "acme-1", CT, PAYLOAD)
        a, b, c = spool.due("telemetry", 10)
        spool.retry_later([a.seq], 60)
        spool.reject(b.seq, "INVALID_ARGUMENT", "INVALID_MESSAGE", "payload: too long")
        spool.delivered([c.seq])
        assert spool.due("telemetry", 10) == []
        assert spool.next_due_in_s("telemetry") == pytest.approx(60, abs=1)
        (rejected,) = spool.rejected()
        assert (rejected.message_id, rejected.reason) == (b.message_id, "INVALID_MESSAGE")
        counters = spool.stats().counters
        assert (counters["retried"], counters["rejected"], counters["delivered"]) == (1, 1, 1)
        assert spool.depth == 1


def test_a_retried_message_is_due_again_behind_the_senders_cursor(tmp_path):
    # The sender walks forward with a cursor while frames are in flight; a message that
    # came back "retry" sits behind it and must still be picked up once due, not only
    # when the sender runs dry (a busy gateway never does).
    with Spool(tmp_path / "s.db") as spool:
        for _ in range(6):
            spool.enqueue("telemetry", "acme-1", CT, PAYLOAD)
        first = spool.due("telemetry", 3)
        spool.retry_later([first[0].seq], 0)  # due at once
        cursor = first[-1].seq
        nxt = spool.due("telemetry", 3, after_seq=cursor)
        assert [p.seq for p in nxt] == [first[0].seq, first[-1].seq + 1, first[-1].seq + 2]
        # Once it is in flight again, the sender skips it.
        again = spool.due("telemetry", 3, after_seq=nxt[-1].seq, skip={first[0].seq})
        assert [p.seq for p in again] == [nxt[-1].seq + 1]


def test_frames_are_bounded_by_bytes_but_never_empty(tmp_path):
    with Spool(tmp_path / "s.db") as spool:
        for size in (100, 100, 100, 5000):
            spool.enqueue("telemetry", "acme-1", CT, b"x" * size)
        one = len(spool.due("telemetry", 1)[0].envelope)
        sizes = [len(p.envelope) for p in spool.due("telemetry", 10, max_bytes=one * 5 // 2)]
        assert sizes == [one, one]
        spool.delivered([p.seq for p in spool.due("telemetry", 3)])
        (big,) = spool.due("telemetry", 10, max_bytes=one)
        assert len(big.envelope) > 5000


def test_one_process_per_spool(tmp_path):
    with Spool(tmp_path / "s.db"), pytest.raises(SpoolLockedError, match="one sender per spool"):
        Spool(tmp_path / "s.db")
    Spool(tmp_path / "s.db").close()  # free again once closed


def test_unknown_endpoint_is_refused(tmp_path):
    with Spool(tmp_path / "s.db") as spool, pytest.raises(ValueError, match="unknown endpoint"):
        spool.enqueue("metrics", "acme-1", CT, PAYLOAD)


def test_enqueue_many_is_one_transaction_all_or_none(tmp_path):
    limits = SpoolLimits(max_bytes=2000, when_full="refuse")
    with Spool(tmp_path / "s.db", limits) as spool:
        batch = [NewMessage(f"acme-{i % 2}", CT, b"x" * 100) for i in range(5)]
        msgs = spool.enqueue_many("telemetry", batch).messages
        assert [(m.device_id, m.sequence) for m in msgs] == [
            ("acme-0", 1),
            ("acme-1", 1),
            ("acme-0", 2),
            ("acme-1", 2),
            ("acme-0", 3),
        ]
        size = spool.stats().bytes
        too_many = [NewMessage("acme-0", CT, b"x" * 100) for _ in range(50)]
        with pytest.raises(SpoolFullError):
            spool.enqueue_many("telemetry", too_many)
        # None of the refused batch was kept, its messages are counted, and the spool's
        # idea of its own size did not drift (it would refuse too early afterwards).
        assert (spool.stats().depth, spool.stats().bytes) == (5, size)
        assert spool.stats().counters["refused"] == 50
        assert spool.enqueue("telemetry", "acme-0", CT, b"{}").message.sequence == 4
        size = spool.stats().bytes
    with Spool(tmp_path / "s.db", limits) as reopened:
        assert (reopened.depth, reopened.stats().bytes) == (6, size)


def test_metrics_report_depth_size_age_and_every_drop_by_reason(tmp_path):
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("test")
    limits = SpoolLimits(max_bytes=1000, when_full="drop_oldest")
    with Spool(tmp_path / "s.db", limits) as spool:
        GatewayMetrics(spool, meter)
        for _ in range(15):
            spool.enqueue("telemetry", "acme-1", CT, b"x" * 100)
        stats = spool.stats()
        points = {
            (m.name, tuple(sorted(p.attributes.items()))): p.value
            for rm in reader.get_metrics_data().resource_metrics
            for sm in rm.scope_metrics
            for m in sm.metrics
            for p in m.data.data_points
        }
    assert points[("headwater.gateway.spool.messages", ())] == stats.depth
    assert points[("headwater.gateway.spool.size", ())] == stats.bytes
    assert points[("headwater.gateway.spool.oldest_age", ())] >= 0
    dropped = stats.counters["dropped_oldest"]
    assert dropped > 0
    assert points[
        ("headwater.gateway.spool.dropped_messages", (("reason", "dropped_oldest"),))
    ] == (dropped)
    assert points[("headwater.gateway.spool.dropped_messages", (("reason", "refused"),))] == 0
    # A closed spool reports nothing instead of failing the collection.
    after = reader.get_metrics_data()
    assert not [
        p
        for rm in (after.resource_metrics if after else [])
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name.startswith("headwater.gateway.spool")
        for p in m.data.data_points
    ]


def test_a_batch_bigger_than_the_spool_keeps_its_newest_under_drop_oldest(tmp_path):
    limits = SpoolLimits(max_bytes=1000, when_full="drop_oldest")
    with Spool(tmp_path / "s.db", limits) as spool:
        old = spool.enqueue("telemetry", "acme-1", CT, b"x" * 100).message_id
        result = spool.enqueue_many("telemetry", [NewMessage("acme-1", CT, b"x" * 100)] * 20)
        ids = [m.message_id for m in result.messages]
        left = [m.message_id for m in envelope_of(spool)]
        assert left == ids[-len(left) :] and spool.stats().bytes <= 1000
        assert list(result.dropped) == [old, *ids[: len(ids) - len(left)]]
        assert [m.sequence for m in result.messages] == list(range(2, 22))
