"""Read topics back after a dev-stack run and check them against what was acknowledged."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

from confluent_kafka import Message

from headwater import record_headers as rh
from headwater.kafka import read
from headwater.kafka.settings import KafkaSettings

#: Who reads back after a run (``client.id`` role and never-joined ``group.id``).
READBACK_ROLE = "headwater-devstack-readback"


def read_topic(
    kafka: KafkaSettings | str, topic: str, timeout_s: float = 60.0
) -> Iterator[Message]:
    """Yield every record of ``topic`` to its end, as the dev stack's reader.

    :func:`headwater.kafka.read.read_topic` under the dev stack's own name.
    """
    return read.read_topic(kafka, topic, timeout_s, client_role=READBACK_ROLE)


@dataclass
class IngestReadback:
    """Every message id found in the ingest topics, with its coordinates."""

    found: dict[str, tuple[str, int, int]] = field(default_factory=dict)
    records: int = 0
    received_at_ms: dict[str, int] = field(default_factory=dict)
    #: Records per device id (the record's key).
    per_device: Counter[str] = field(default_factory=Counter)


def read_ingest(bootstrap_servers: str, topics: list[str]) -> IngestReadback:
    """Collect the message ids in the ingest topics (repeats keep the first coordinate)."""
    result = IngestReadback()
    for topic in topics:
        for msg in read_topic(bootstrap_servers, topic):
            result.records += 1
            result.per_device[(msg.key() or b"").decode(errors="replace")] += 1
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
