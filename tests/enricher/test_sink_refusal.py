"""The sink against the real broker: a record the producer refuses becomes a dead letter.

Before, only ``BufferError`` was handled: a record over the producer's maximum size
raised out of the task, and the replay raised again, stopping the query for good.
"""

from __future__ import annotations

import pyarrow as pa

from headwater import record_headers as rh
from headwater.enricher.sink import unproducible
from headwater.enricher.sink.kafka_sink import KafkaStreamWriter
from headwater.proto.events.v1 import completion_pb2, dead_letter_pb2
from tests.support.kafkatools import completions, make_topics, read_all

_HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
#: The sink's input columns (schema.OUTPUT), without a Spark session to parse the DDL.
SCHEMA = pa.schema(
    [("topic", pa.string()), ("key", pa.binary()), ("value", pa.binary()), ("headers", _HEADERS)]
    + [(n, pa.string()) for n in ("role", "label", "ref", "event_id")]
    + [("received_ms", pa.int64()), ("batch_ms", pa.int64())]
)


def _row(topic: str, role: str, value: bytes, ref: str, **kw: object) -> dict[str, object]:
    headers = [{"key": rh.MESSAGE_ID, "value": b"m-big"}]
    return {
        "topic": topic,
        "key": b"dev-1",
        "value": value,
        "headers": headers,
        "role": role,
        "label": kw.get("label"),
        "ref": ref,
        "event_id": kw.get("event_id"),
        "received_ms": None,
        "batch_ms": 1000,
    }


def test_a_refused_event_is_dead_lettered_and_its_completion_says_so(kafka_bootstrap) -> None:
    topics = make_topics(kafka_bootstrap, partitions=1)
    ref = f"{topics.ingest[0]}/0/42"
    done = completion_pb2.Completion(message_id="m-big", device_id="dev-1", outcome=1)
    small = completion_pb2.Completion(message_id="m-ok", device_id="dev-1", outcome=1)
    rows = [
        # Over librdkafka's default message.max.bytes (1,000,000): produce() raises.
        _row(topics.event_topic("telemetry"), "event", b"x" * 1_200_000, ref, event_id="e1"),
        _row(topics.event_topic("telemetry"), "event", b"fine", "other/0/1", event_id="e2"),
        _row(topics.completions, "completion", done.SerializeToString(), ref, label="ENRICHED"),
        _row(
            topics.completions,
            "completion",
            small.SerializeToString(),
            "other/0/1",
            label="ENRICHED",
        ),
    ]
    batch = pa.RecordBatch.from_pylist(rows, schema=SCHEMA)
    writer = KafkaStreamWriter(
        {"kafka.bootstrap.servers": kafka_bootstrap, "deadLetterTopic": topics.deadletter}
    )
    report = writer.write(iter([batch]))  # must not raise
    assert report.counts[f"deadletter:{unproducible.REASON}"] == 1
    (letter,) = [
        dead_letter_pb2.DeadLetter.FromString(m.value())
        for m in read_all(kafka_bootstrap, topics.deadletter)
    ]
    assert (letter.stage, letter.reason, letter.message_id) == (
        "produce",
        "PRODUCE_REFUSED",
        "m-big",
    )
    assert (letter.source.topic, letter.source.offset) == (topics.ingest[0], 42)
    assert "1200000 bytes" in letter.error_message
    got = {c.message_id: c for c in completions(read_all(kafka_bootstrap, topics.completions))}
    assert got["m-big"].outcome == completion_pb2.OUTCOME_DEAD_LETTERED
    assert (got["m-big"].reason, len(got["m-big"].events)) == ("PRODUCE_REFUSED", 0)
    assert got["m-ok"].outcome == completion_pb2.OUTCOME_ENRICHED
    assert [e.event_id for e in got["m-ok"].events] == ["e2"]


def test_without_a_dead_letter_topic_a_refusal_still_fails_loudly(kafka_bootstrap) -> None:
    topics = make_topics(kafka_bootstrap, partitions=1)
    rows = [_row(topics.state, "state", b"x" * 1_200_000, "")]
    batch = pa.RecordBatch.from_pylist(rows, schema=SCHEMA)
    writer = KafkaStreamWriter({"kafka.bootstrap.servers": kafka_bootstrap})
    try:
        writer.write(iter([batch]))
    except Exception as exc:  # the producer's own error, not swallowed
        assert "MSG_SIZE_TOO_LARGE" in str(exc) or "too large" in str(exc).lower()
    else:
        raise AssertionError("a refused record with nowhere to go must fail the task")


def test_a_ref_as_the_operator_writes_it_round_trips_to_a_source() -> None:
    # The JVM operator writes "<topic>/<partition>/<offset>" (Message.ref, pinned in its
    # SnapshotAndRecordsTest); a topic name may hold dots.
    src = unproducible.source_of_ref("a.b/3/9")
    assert src is not None and (src.topic, src.partition, src.offset) == ("a.b", 3, 9)
