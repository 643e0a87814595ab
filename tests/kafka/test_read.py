"""``headwater.kafka.read``: the one reader of a topic to its end, on the session broker."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

import pytest
from confluent_kafka import Producer

from headwater.kafka.read import READ_ROLE, TopicMissingError, read_topic


def produce(bootstrap: str, topic: str, count: int, partitions: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(count):
        producer.produce(topic, f"v{i}".encode(), partition=i % partitions)
    assert producer.flush(10) == 0


def test_reads_every_partition_to_its_end_and_no_further(kafka_bootstrap, topic_factory) -> None:
    topic = topic_factory("read", partitions=3)
    produce(kafka_bootstrap, topic, 30, 3)
    reader = read_topic(kafka_bootstrap, topic, timeout_s=30)
    first = next(reader)
    produce(kafka_bootstrap, topic, 6, 3)  # after the read began: beyond its end
    rest = list(reader)
    values = sorted(m.value() for m in [first, *rest])
    assert values == sorted(f"v{i}".encode() for i in range(30))
    for partition in range(3):  # offset order within a partition
        offsets = [m.offset() for m in [first, *rest] if m.partition() == partition]
        assert offsets == sorted(offsets) == list(range(10))


def test_an_empty_topic_gives_nothing(kafka_bootstrap, topic_factory) -> None:
    assert list(read_topic(kafka_bootstrap, topic_factory("empty", partitions=2), 10)) == []


def test_a_missing_topic_gives_nothing_unless_required(kafka_bootstrap) -> None:
    missing = f"missing.{uuid.uuid4().hex[:8]}"
    assert list(read_topic(kafka_bootstrap, missing, 10)) == []
    with pytest.raises(TopicMissingError, match=f"topic {missing} does not exist"):
        list(read_topic(kafka_bootstrap, missing, 10, require=True))


def test_dlq_reads_as_itself_never_as_the_dev_stack(monkeypatch) -> None:
    """``headwater dlq`` once read as the dev stack's group (headwater-devstack-readback)."""
    from headwater.kafka import read
    from headwater.ops import dlq

    configs: list[dict[str, object]] = []

    class Recording:
        def __init__(self, config: dict[str, object]) -> None:
            configs.append(config)

        def list_topics(self, topic: str, timeout: float) -> SimpleNamespace:
            return SimpleNamespace(topics={})

        def close(self) -> None:
            pass

    monkeypatch.setattr(read, "Consumer", Recording)
    assert list(dlq.read_dead_letters("127.0.0.1:9", "deadletter.v1")) == []
    assert configs[0]["group.id"] == READ_ROLE == "headwater-read"
    assert str(configs[0]["client.id"]).startswith("headwater-read-")
