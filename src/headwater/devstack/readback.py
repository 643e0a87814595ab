"""Read topics back after a dev-stack run and check them against what was acknowledged."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from confluent_kafka import Consumer, Message, TopicPartition

from headwater import record_headers as rh
from headwater.kafka.settings import KafkaSettings, resolve_kafka


def read_topic(
    kafka: KafkaSettings | str, topic: str, timeout_s: float = 60.0
) -> Iterator[Message]:
    """Yield every record of ``topic`` from the log start to its end (the high watermark).

    The end is taken when the read begins; records appended later are not read.

    Args:
        kafka: The connection (bootstrap servers alone: security from ``HEADWATER_KAFKA_*``).
        topic: The topic to read.
        timeout_s: How long to read at most.
    """
    consumer = Consumer(
        # The group is required by librdkafka but never joined: partitions are assigned.
        resolve_kafka(kafka).consumer_config("headwater-readback", "headwater-devstack-readback")
    )
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if metadata is None or metadata.error is not None:
            return
        behind: dict[int, int] = {}
        assignment = []
        for partition in metadata.partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
            assignment.append(TopicPartition(topic, partition, low))
            if high > low:
                behind[partition] = high
        consumer.assign(assignment)
        deadline = time.monotonic() + timeout_s
        while behind and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.2):
                if msg.error():
                    continue
                partition, offset = msg.partition() or 0, msg.offset() or 0
                if offset < behind.get(partition, 0):
                    yield msg
                if offset + 1 >= behind.get(partition, 0):
                    behind.pop(partition, None)
    finally:
        consumer.close()


@dataclass
class IngestReadback:
    """Every message id found in the ingest topics, with its coordinates."""

    found: dict[str, tuple[str, int, int]] = field(default_factory=dict)
    records: int = 0
    received_at_ms: dict[str, int] = field(default_factory=dict)


def read_ingest(bootstrap_servers: str, topics: list[str]) -> IngestReadback:
    """Collect the message ids in the ingest topics (repeats keep the first coordinate)."""
    result = IngestReadback()
    for topic in topics:
        for msg in read_topic(bootstrap_servers, topic):
            result.records += 1
            headers: dict[str, bytes] = dict(msg.headers() or [])  # type: ignore[arg-type]
            message_id = headers.get(rh.MESSAGE_ID, b"").decode()
            result.found.setdefault(message_id, (topic, msg.partition() or 0, msg.offset() or 0))
            received = headers.get(rh.RECEIVED_AT_MS)
            if received:
                result.received_at_ms.setdefault(message_id, int(received))
    return result


def missing_acks(acked: dict[str, tuple[str, int, int]], readback: IngestReadback) -> list[str]:
    """Return the message ids answered OK that are not in Kafka."""
    return [message_id for message_id in acked if message_id not in readback.found]
