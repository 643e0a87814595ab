"""Subscriber tests: records made with the generated classes, on the session's real broker.

Every subscriber joins a consumer group, so each test joins as few times as it can, and
every wait is bounded.
"""

from __future__ import annotations

import asyncio
import uuid
import zlib
from collections.abc import Callable, Iterable
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from headwater.kafka.admin import ensure_topics
from headwater.kafka.settings import KafkaSettings
from headwater.proto.events.v1 import completion_pb2, event_pb2
from headwater.subscriber import Subscriber, SubscriberSettings
from headwater.topics import TopicSpec

Record = bytes | tuple[bytes, list[tuple[str, str | bytes | None]]]


def completion(
    message_id: str,
    device: str = "acme-1",
    attempt: int = 1,
    outcome: completion_pb2.Outcome = completion_pb2.OUTCOME_ENRICHED,
    offset: int | None = None,
    tenant: str = "acme",
) -> bytes:
    """Return a completion's bytes (its source offset defaults to a number from the id)."""
    return completion_pb2.Completion(
        tenant=tenant,
        message_id=message_id,
        device_id=device,
        outcome=outcome,
        attempt=attempt,
        source=completion_pb2.SourceRecord(
            topic="ingest.telemetry.v1",
            partition=0,
            offset=zlib.crc32(message_id.encode()) if offset is None else offset,
        ),
    ).SerializeToString()


def event(event_id: str, device: str = "acme-1", event_type: str = "telemetry") -> bytes:
    """Return a common-format event's bytes."""
    return event_pb2.Event(
        event_id=event_id, message_id=f"msg-{event_id}", device_id=device, event_type=event_type
    ).SerializeToString()


def produce(bootstrap: str, topic: str, values: Iterable[Record], partitions: int = 1) -> None:
    """Write ``values`` (bytes, or bytes and headers) round-robin over ``partitions``."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i, value in enumerate(values):
        body, headers = value if isinstance(value, tuple) else (value, [])
        producer.produce(topic, body, key=b"acme-1", partition=i % partitions, headers=headers)
    assert producer.flush(30) == 0


def committed(bootstrap: str, group: str, topic: str, partitions: int = 1) -> list[int]:
    """Return the group's committed offsets of ``topic`` (-1001: none)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        tps = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return [tp.offset for tp in tps]
    finally:
        consumer.close()


def new_group(bootstrap: str) -> str:
    """Return a consumer group id no test used before, with its dead-letter topic created.

    The broker creates no topic on first use (as production clusters should not), and the
    subscriber refuses to start without its dead-letter topic.
    """
    group = f"g-{uuid.uuid4().hex[:10]}"
    ensure_topics(bootstrap, [TopicSpec(f"{group}.deadletter.v1", 1, 1)])
    return group


@pytest.fixture
def kafka(kafka_bootstrap: str) -> KafkaSettings:
    """Connection settings for the session broker."""
    return KafkaSettings(bootstrap_servers=kafka_bootstrap)


#: The smallest session timeout real Kafka accepts by default (group.min.session.timeout.ms).
TEST_SESSION_TIMEOUT_S = 6.0


def sub_settings(group: str, topics: tuple[str, ...], **kw: Any) -> SubscriberSettings:
    """Return subscriber settings for a test: ``kw`` over the defaults, quicker joins."""
    return SubscriberSettings(group, topics, **{"session_timeout_s": TEST_SESSION_TIMEOUT_S} | kw)


async def run_until(
    subscriber: Subscriber[Any], done: Callable[[], bool], within_s: float = 60
) -> None:
    """Run ``subscriber`` until ``done()`` holds, then stop it gracefully (bounded)."""
    stop = asyncio.Event()
    task = asyncio.create_task(subscriber.run(stop))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    try:
        while not done():
            if task.done():
                task.result()  # raises what stopped it
                raise AssertionError(f"the subscriber stopped early: {subscriber.counts}")
            assert loop.time() < deadline, f"not done within {within_s}s: {subscriber.counts}"
            await asyncio.sleep(0.05)
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
