"""Subscriber tests: completions produced with the generated classes to the session broker."""

from __future__ import annotations

from collections.abc import Iterable

from confluent_kafka import Consumer, Producer, TopicPartition

from headwater.proto.events.v1 import completion_pb2


def completion(message_id: str, device: str = "acme-1", attempt: int = 1) -> bytes:
    """Return an ENRICHED completion's bytes."""
    return completion_pb2.Completion(
        message_id=message_id,
        device_id=device,
        outcome=completion_pb2.OUTCOME_ENRICHED,
        attempt=attempt,
    ).SerializeToString()


def produce(bootstrap: str, topic: str, values: Iterable[bytes], partitions: int = 1) -> None:
    """Write ``values`` to ``topic``, spread over ``partitions`` in turn, and wait for acks."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i, value in enumerate(values):
        producer.produce(topic, value, partition=i % partitions)
    assert producer.flush(30) == 0


def committed(bootstrap: str, group: str, topic: str, partitions: int = 1) -> list[int]:
    """Return the group's committed offsets of ``topic``."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        tps = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return [tp.offset for tp in tps]
    finally:
        consumer.close()
