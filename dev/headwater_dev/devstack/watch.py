"""``headwater devstack watch``: print the records of Headwater topics as they arrive.

Each record is one JSON line (topic, partition, offset, key, and the value decoded with
the message type the topic carries). It reads without a consumer group, so it never
moves anyone's offsets, and stops after ``--max-records`` or ``--max-seconds``, or on
Ctrl-C / SIGTERM.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from google.protobuf import descriptor_pool, json_format, message_factory

from headwater.contracts import TOPIC_MESSAGES
from headwater.kafka.settings import KafkaSettings, resolve_kafka
from headwater.runtime.signals import interrupt_on_stop
from headwater.topics import COMPLETIONS_TOPIC, DEADLETTER_TOPIC, EVENT_TOPICS

DEFAULT_TOPICS = [*EVENT_TOPICS.values(), COMPLETIONS_TOPIC, DEADLETTER_TOPIC]


def decode(topic: str, value: bytes | None) -> Any:
    """Decode a record value with the topic's message type (JSON form); raw text otherwise."""
    name = TOPIC_MESSAGES.get(topic)
    if name is None or value is None:
        return None if value is None else value.decode(errors="replace")
    cls = message_factory.GetMessageClass(descriptor_pool.Default().FindMessageTypeByName(name))
    return json_format.MessageToDict(cls.FromString(value))


def follow(
    kafka: KafkaSettings | str,
    topics: list[str],
    from_beginning: bool,
    max_records: int | None,
    max_seconds: float | None,
) -> Iterator[dict[str, Any]]:
    """Yield the records of ``topics`` as dicts, within the given bounds."""
    consumer = Consumer(
        # The group is required by librdkafka; never used: no subscribe.
        resolve_kafka(kafka).consumer_config("headwater-watch", "headwater-devstack-watch")
    )
    try:
        metadata = consumer.list_topics(timeout=10).topics
        assignment = [
            TopicPartition(topic, partition, OFFSET_BEGINNING)
            for topic in topics
            if topic in metadata
            for partition in metadata[topic].partitions
        ]
        if not from_beginning:
            # The end as of now, asked for explicitly: OFFSET_END would be resolved at the
            # first fetch, so a record produced right after the "watching" line could be
            # skipped. From that line on, every new record is printed.
            for tp in assignment:
                tp.offset = consumer.get_watermark_offsets(tp, timeout=10)[1]
        consumer.assign(assignment)
        where = "their beginning" if from_beginning else "their end"
        print(
            f"watching {len(assignment)} partitions of {', '.join(topics)} from {where}; "
            "Ctrl-C stops",
            file=sys.stderr,
            flush=True,
        )
        deadline = None if max_seconds is None else time.monotonic() + max_seconds
        seen = 0
        while (deadline is None or time.monotonic() < deadline) and (
            max_records is None or seen < max_records
        ):
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            seen += 1
            topic = msg.topic() or ""
            yield {
                "topic": topic,
                "partition": msg.partition(),
                "offset": msg.offset(),
                "key": (msg.key() or b"").decode(errors="replace"),
                "value": decode(topic, msg.value()),
            }
    finally:
        consumer.close()


def watch(
    kafka: KafkaSettings | str,
    topics: list[str],
    from_beginning: bool,
    max_records: int | None,
    max_seconds: float | None,
) -> int:
    """Print records as JSON lines until a bound or a stop signal; return the exit code."""
    interrupt_on_stop()
    try:
        for record in follow(kafka, topics, from_beginning, max_records, max_seconds):
            print(json.dumps(record), flush=True)
    except KeyboardInterrupt:
        pass
    return 0
