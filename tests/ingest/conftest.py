"""Fixtures of ingest's own tests; the server fixtures shared with the gateway's tests are in
tests/support/ingest.py (a plugin of the whole suite), whose helpers are re-exported here for
the modules that import them from ``.conftest``."""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable, Iterator

import pytest
from confluent_kafka import Consumer, TopicPartition

from headwater.ingest.settings import IngestSettings
from tests.support.ingest import (  # noqa: F401  (re-exported for the test modules)
    TOKENS,
    TOKENS_YAML,
    RunningIngest,
    bearer,
    details_of,
    device_message,
)


@pytest.fixture
async def ingest(
    ingest_settings: IngestSettings, start_ingest: Callable[..., Awaitable[RunningIngest]]
) -> RunningIngest:
    return await start_ingest(ingest_settings)


@pytest.fixture
def read_record_at() -> Iterator[Callable[[str], Callable[[str, int, int], object]]]:
    """Return a reader of the record at (topic, partition, offset) on given servers."""
    consumers: list[Consumer] = []

    def reader(bootstrap: str) -> Callable[[str, int, int], object]:
        consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": "test-reader", "enable.auto.commit": False}
        )
        consumers.append(consumer)
        return functools.partial(_read_at, consumer)

    yield reader
    for consumer in consumers:
        consumer.close()


@pytest.fixture
def read_record(
    read_record_at: Callable[[str], Callable[[str, int, int], object]], kafka_bootstrap: str
) -> Callable[[str, int, int], object]:
    """Read the record at (topic, partition, offset) from the session broker."""
    return read_record_at(kafka_bootstrap)


def _read_at(consumer: Consumer, topic: str, partition: int, offset: int) -> object:
    consumer.assign([TopicPartition(topic, partition, offset)])
    deadline = time.monotonic() + 60  # only a hang fails it
    while time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            return msg
    raise AssertionError(f"no record at {topic}/{partition}@{offset}")
