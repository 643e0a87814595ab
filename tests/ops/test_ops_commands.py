"""The operator commands against the real broker."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from google.protobuf.timestamp_pb2 import Timestamp

from headwater.kafka.read import read_topic
from headwater.ops import dlq
from headwater.ops.offsets import OffsetsError, admin_client, apply_reset, plan_reset, show
from headwater.proto.device.v1 import device_message_pb2
from headwater.proto.events.v1 import completion_pb2, dead_letter_pb2
from tests.support.kafkatools import read_from


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "headwater.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        input=stdin,
    )


def produce(bootstrap: str, topic: str, values: list[bytes], partition: int = 0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for value in values:
        producer.produce(topic, value, partition=partition)
    assert producer.flush(10) == 0


def commit(bootstrap: str, group: str, topic: str, offset: int) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    consumer.close()


def test_offsets_show_reports_committed_start_end_and_lag(kafka_bootstrap, topic_factory):
    topic = topic_factory("offs")
    produce(kafka_bootstrap, topic, [b"a", b"b", b"c", b"d"])
    commit(kafka_bootstrap, "g-show", topic, 1)
    result = run(
        "offsets", "show", "--bootstrap-servers", kafka_bootstrap, "--group", "g-show", "--json"
    )
    assert result.returncode == 0, result.stderr
    row = json.loads(result.stdout.splitlines()[0])
    assert (row["committed"], row["log_start"], row["log_end"], row["lag"]) == (1, 0, 4, 3)
    assert row["out_of_range"] is False


def test_offsets_reset_is_a_dry_run_unless_executed(kafka_bootstrap, topic_factory):
    topic = topic_factory("offs")
    produce(kafka_bootstrap, topic, [b"a", b"b", b"c"])
    commit(kafka_bootstrap, "g-reset", topic, 3)
    base = [
        "offsets",
        "reset",
        "--bootstrap-servers",
        kafka_bootstrap,
        "--group",
        "g-reset",
        "--topic",
        topic,
    ]
    dry = run(*base, "--to", "earliest")
    assert dry.returncode == 0 and "dry run" in dry.stderr
    admin = admin_client(kafka_bootstrap)
    assert show(admin, "g-reset", [topic])[0].committed == 3
    done = run(*base, "--to", "offset", "--value", "1", "--execute")
    assert done.returncode == 0, done.stderr
    assert show(admin, "g-reset", [topic])[0].committed == 1
    bad = run(*base, "--to", "offset", "--value", "99", "--execute")
    assert bad.returncode == 2 and "outside" in bad.stderr


def test_offsets_reset_by_timestamp(kafka_bootstrap, topic_factory):
    topic = topic_factory("offs")
    produce(kafka_bootstrap, topic, [b"old"])
    time.sleep(0.05)
    cut = int(time.time() * 1000)
    time.sleep(0.05)
    produce(kafka_bootstrap, topic, [b"new1", b"new2"])
    commit(kafka_bootstrap, "g-ts", topic, 3)
    admin = admin_client(kafka_bootstrap)
    plan = plan_reset(admin, "g-ts", [topic], "timestamp", cut)
    assert [target for _, target in plan.moves] == [1]


@pytest.mark.slow
def test_offsets_reset_is_refused_while_the_group_is_active(kafka_bootstrap, topic_factory):
    topic = topic_factory("offs")
    produce(kafka_bootstrap, topic, [b"a"])
    consumer = Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": "g-active",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    try:
        deadline = time.monotonic() + 60
        while consumer.poll(0.5) is None and time.monotonic() < deadline:
            pass
        consumer.commit(asynchronous=False)
        admin = admin_client(kafka_bootstrap)
        plan = plan_reset(admin, "g-active", [topic], "earliest")
        with pytest.raises(OffsetsError, match="stop its consumers first"):
            apply_reset(admin, plan)
    finally:
        consumer.close()


def dead_letter(message_id: str, reason: str, source_topic: str = "ingest.telemetry.v1") -> bytes:
    ts = Timestamp()
    ts.GetCurrentTime()
    return dead_letter_pb2.DeadLetter(
        message_id=message_id,
        device_id="acme-001",
        source=completion_pb2.SourceRecord(topic=source_topic, partition=0, offset=7),
        # The ingest topics hold device messages only (the gateway's tests read them).
        original_value=device_message_pb2.DeviceMessage(
            message_id=message_id, device_id="acme-001"
        ).SerializeToString(),
        original_headers=[dead_letter_pb2.Header(key="message-id", value=message_id.encode())],
        stage="normalize",
        reason=reason,
        error_class="JSONDecodeError",
        error_message="Expecting value: line 1 column 1",
        attempts=1,
        dead_lettered_time=ts,
    ).SerializeToString()


def test_dlq_list_show_and_filters(kafka_bootstrap, topic_factory):
    topic = topic_factory("dlq")
    produce(
        kafka_bootstrap,
        topic,
        [dead_letter("m1", "UNKNOWN_FORMAT"), dead_letter("m2", "UNDECODABLE_PAYLOAD")],
    )
    listed = run("dlq", "list", "--bootstrap-servers", kafka_bootstrap, "--topic", topic, "--json")
    assert [json.loads(line)["message_id"] for line in listed.stdout.splitlines()] == ["m1", "m2"]
    only = run(
        "dlq",
        "list",
        "--bootstrap-servers",
        kafka_bootstrap,
        "--topic",
        topic,
        "--reason",
        "UNKNOWN_FORMAT",
    )
    assert "m1" in only.stdout and "m2" not in only.stdout
    shown = run(
        "dlq",
        "show",
        "--bootstrap-servers",
        kafka_bootstrap,
        "--topic",
        topic,
        "--message-id",
        "m2",
    )
    assert "UNDECODABLE_PAYLOAD" in shown.stdout and "JSONDecodeError" in shown.stdout


def test_dlq_redrive_dry_run_then_execute_with_audit_headers(kafka_bootstrap, topic_factory):
    dl_topic = topic_factory("dlq")
    target = topic_factory("ingest")  # stands in for the ingest topic
    produce(kafka_bootstrap, dl_topic, [dead_letter("m9", "UNKNOWN_FORMAT", source_topic=target)])
    records = list(dlq.read_dead_letters(kafka_bootstrap, dl_topic))
    # Only ingest topics are redrive targets: a foreign source topic is skipped, not sent.
    skipped = list(dlq.redrive(kafka_bootstrap, records, "ops", "fixed normalizer", dry_run=False))
    assert skipped[0].skipped_reason == "source is not an ingest topic"
    letter = records[0].letter
    # A deployment's ingest topics (a prefixed name stands for them): the redrive target.
    ingest = (target,)
    dry = list(
        dlq.redrive(
            kafka_bootstrap, records, "ops", "fixed normalizer", dry_run=True, ingest_topics=ingest
        )
    )
    assert dry[0].sent is False and not dry[0].skipped_reason
    sent = list(
        dlq.redrive(
            kafka_bootstrap, records, "ops", "fixed normalizer", dry_run=False, ingest_topics=ingest
        )
    )
    assert sent[0].sent is True
    found = [
        m
        for m in read_topic(kafka_bootstrap, target)
        if dict(m.headers() or []).get("redrive-by") == b"ops"
    ]
    assert found, "redriven record not in the ingest topic"
    headers = dict(found[-1].headers())
    assert found[-1].value() == letter.original_value
    assert headers["message-id"] == b"m9"
    assert headers["redrive-reason"] == b"fixed normalizer" and headers["redrive-count"] == b"1"


def test_ops_commands_have_help():
    for args in (
        ["dlq", "redrive"],
        ["offsets", "reset"],
        ["lag"],
        ["dlq", "list"],
        ["offsets", "show"],
    ):
        result = run(*args, "--help")
        assert result.returncode == 0 and "usage:" in result.stdout


def test_lag_reports_per_partition_and_the_max(kafka_bootstrap, topic_factory):
    topic = topic_factory("lag")
    produce(kafka_bootstrap, topic, [b"a", b"b", b"c", b"d", b"e"])
    commit(kafka_bootstrap, "g-lag", topic, 2)
    result = run("lag", "--bootstrap-servers", kafka_bootstrap, "--group", "g-lag", "--json")
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert rows[0]["lag"] == 3
    assert rows[-1] == {"group": "g-lag", "max_offset_lag": 3}


def _ingest_original(bootstrap: str, message_id: str, device: str, tenant: str) -> int:
    """Write a device message's ingest record to partition 0; return its offset."""
    offsets: list[int] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    value = device_message_pb2.DeviceMessage(message_id=message_id, device_id=device)
    producer.produce(
        "ingest.telemetry.v1",
        value.SerializeToString(),  # the ingest topics hold device messages only
        device.encode(),
        0,
        headers=[("message-id", message_id.encode()), ("tenant", tenant.encode())],
        on_delivery=lambda err, msg: offsets.append(msg.offset()),
    )
    assert producer.flush(10) == 0
    return offsets[0]


def _letter(message_id: str, device: str, tenant: str, source_offset: int) -> bytes:
    letter = dead_letter_pb2.DeadLetter.FromString(dead_letter(message_id, "UNKNOWN_FORMAT"))
    letter.device_id = device
    letter.source.offset = source_offset
    letter.original_headers.append(dead_letter_pb2.Header(key="tenant", value=tenant.encode()))
    return letter.SerializeToString()


def test_dlq_redrive_skips_a_letter_redriven_already_unless_forced(
    kafka_bootstrap, topic_factory, ingest_topics
):
    # The command redrives to the real ingest topics (ingest_topics: as the ingest tests
    # create them); what it writes there is a device message, like every record there.
    dl_topic = topic_factory("dlq")
    message_id, device = f"m-{uuid.uuid4().hex[:8]}", f"dev-{uuid.uuid4().hex[:8]}"
    acme_at = _ingest_original(kafka_bootstrap, message_id, device, "acme")
    globex_at = _ingest_original(kafka_bootstrap, message_id, device, "globex")
    produce(kafka_bootstrap, dl_topic, [_letter(message_id, device, "acme", acme_at)])

    def redrive(*extra: str) -> tuple[list[dict[str, object]], str]:
        result = run(
            *("dlq", "redrive", "--bootstrap-servers", kafka_bootstrap, "--topic", dl_topic),
            *("--message-id", message_id, "--why", "fixed", "--by", "ops", "--json", *extra),
        )
        assert result.returncode == 0, result.stderr
        return [json.loads(line) for line in result.stdout.splitlines()], result.stderr

    def redrives() -> list[tuple[bytes, int, bytes]]:
        """The redriven records of this message: tenant, partition, count."""
        return [
            (h["tenant"], m.partition(), h["redrive-count"])
            for m in read_from(kafka_bootstrap, "ingest.telemetry.v1", {0: acme_at})
            for h in [dict(m.headers() or [])]
            if h.get("message-id") == message_id.encode() and "redrive-count" in h
        ]

    rows, _ = redrive()  # a dry run: nothing redriven yet
    assert [(r["sent"], r["skipped_reason"]) for r in rows] == [(False, "")]
    rows, _ = redrive("--execute")
    assert [(r["sent"], r["skipped_reason"]) for r in rows] == [(True, "")]
    assert redrives() == [(b"acme", 0, b"1")]  # on the original's partition

    # The same message id of another tenant (same device id) was not redriven: it is sent.
    produce(kafka_bootstrap, dl_topic, [_letter(message_id, device, "globex", globex_at)])
    rows, err = redrive()
    assert [(r["sent"], r["skipped_reason"]) for r in rows] == [
        (False, dlq.ALREADY_REDRIVEN),
        (False, ""),
    ]
    assert "would send 1 " in err and "1 skipped as redriven already" in err
    rows, _ = redrive("--execute")
    assert [r["sent"] for r in rows] == [False, True]
    assert rows[0]["skipped_reason"] == dlq.ALREADY_REDRIVEN
    assert redrives() == [(b"acme", 0, b"1"), (b"globex", 0, b"1")]

    # Both are redriven now; --force sends them again.
    rows, _ = redrive("--execute")
    assert [r["skipped_reason"] for r in rows] == [dlq.ALREADY_REDRIVEN] * 2
    rows, _ = redrive("--execute", "--force")
    assert [(r["sent"], r["skipped_reason"]) for r in rows] == [(True, "")] * 2
    assert sorted(redrives()) == [(b"acme", 0, b"1")] * 2 + [(b"globex", 0, b"1")] * 2
