"""The spool on a real SQLite file: ids, sequences, limits and policies, restarts."""

from __future__ import annotations

import time
import uuid

import pytest

from headwater.gateway.ids import timestamp_ms, uuid7
from headwater.gateway.spool import (
    NewMessage,
    Spool,
    SpoolFullError,
    SpoolLimits,
    SpoolLockedError,
)
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
    # Over 4096 in one millisecond borrows the next: never more than a few ms ahead.
    assert before <= timestamp_ms(ids[0]) and timestamp_ms(ids[-1]) <= after + 2
    # A clock step backwards never makes an id sort before the last one.
    assert uuid7(before - 60_000) > ids[-1]


def test_enqueue_assigns_id_and_per_device_sequence_that_survive_a_restart(tmp_path):
    path = tmp_path / "spool.db"
    with Spool(path) as spool:
        first = [spool.enqueue("telemetry", "acme-1", CT, PAYLOAD).message_id for _ in range(3)]
        spool.enqueue("telemetry", "acme-2", CT, PAYLOAD)
    with Spool(path) as spool:
        more = spool.enqueue("alarms", "acme-1", CT, PAYLOAD).message_id
        msgs = envelope_of(spool)
        assert [m.message_id for m in msgs][:3] == first
        assert [(m.device_id, m.sequence) for m in msgs] == [
            ("acme-1", 1),
            ("acme-1", 2),
            ("acme-1", 3),
            ("acme-2", 1),
        ]
        (alarm,) = envelope_of(spool, "alarms")
        assert (alarm.message_id, alarm.sequence) == (more, 4)
        assert alarm.payload == PAYLOAD and alarm.content_type == CT
        assert spool.stats().depth == 5


def test_refuse_policy_raises_counts_and_keeps_what_it_has(tmp_path):
    limits = SpoolLimits(max_bytes=600, when_full="refuse")
    with Spool(tmp_path / "s.db", limits) as spool:
        kept = []
        with pytest.raises(SpoolFullError, match="is full"):
            while True:
                kept.append(spool.enqueue("telemetry", "acme-1", CT, b"x" * 100).message_id)
        with pytest.raises(SpoolFullError):
            spool.enqueue("telemetry", "acme-1", CT, b"x" * 100)
        stats = spool.stats()
        assert stats.counters["refused"] == 2
        assert [m.message_id for m in envelope_of(spool)] == kept
        # A refused enqueue used no sequence number.
        spool.delivered([p.seq for p in spool.due("telemetry", 1)])
        spool.enqueue("telemetry", "acme-1", CT, b"x" * 100)
        assert envelope_of(spool)[-1].sequence == len(kept) + 1


def test_drop_oldest_policy_makes_room_and_counts_every_drop(tmp_path):
    limits = SpoolLimits(max_bytes=1000, when_full="drop_oldest")
    with Spool(tmp_path / "s.db", limits) as spool:
        ids = [spool.enqueue("telemetry", "acme-1", CT, b"x" * 100).message_id for _ in range(20)]
        left = [m.message_id for m in envelope_of(spool)]
        assert left == ids[-len(left) :]
        assert spool.stats().bytes <= 1000
        assert spool.stats().counters["dropped_oldest"] == len(ids) - len(left)


def test_a_message_bigger_than_the_spool_is_refused_under_any_policy(tmp_path):
    with (
        Spool(tmp_path / "s.db", SpoolLimits(max_bytes=100)) as spool,
        pytest.raises(SpoolFullError, match="larger than the whole spool"),
    ):
        spool.enqueue("telemetry", "acme-1", CT, b"x" * 200)


def test_old_messages_expire_and_are_counted(tmp_path):
    with Spool(tmp_path / "s.db", SpoolLimits(max_age_s=0.001)) as spool:
        spool.enqueue("telemetry", "acme-1", CT, PAYLOAD, device_time_ms=1)
        time.sleep(0.01)
        spool.enqueue("telemetry", "acme-1", CT, PAYLOAD)
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
        msgs = spool.enqueue_many("telemetry", batch)
        assert [(m.device_id, m.sequence) for m in msgs] == [
            ("acme-0", 1),
            ("acme-1", 1),
            ("acme-0", 2),
            ("acme-1", 2),
            ("acme-0", 3),
        ]
        too_many = [NewMessage("acme-0", CT, b"x" * 100) for _ in range(50)]
        with pytest.raises(SpoolFullError):
            spool.enqueue_many("telemetry", too_many)
        assert spool.stats().depth == 5  # none of the refused batch was kept
        assert spool.enqueue("telemetry", "acme-0", CT, b"{}").sequence == 4
