"""The subscriber against the real broker: duplicates, poison, start points, shutdown, rebalance.

Group joins on the embedded broker take ~20 s (docs/embedded-broker.md), so each test
joins as few times as it can.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter

import pytest
from aiokafka import TopicPartition
from aiokafka import errors as kafka_errors

from headwater.devstack.readback import read_topic
from headwater.kafka_settings import KafkaSettings
from headwater.proto.events.v1 import completion_pb2
from headwater.subscriber.subscriber import (
    PARKED_ATTEMPTS,
    PARKED_ERROR_CLASS,
    PARKED_SOURCE,
    Delivery,
    StartPointRequiredError,
    Subscriber,
    out_of_range_error,
)

from .conftest import committed, completion, produce

pytestmark = pytest.mark.slow


def settings(bootstrap: str) -> KafkaSettings:
    # aiokafka's idempotent producer fails on the embedded broker (docs/embedded-broker.md).
    return KafkaSettings(bootstrap_servers=bootstrap, enable_idempotence=False)


async def run_until(subscriber: Subscriber, done, within_s: float = 90) -> None:
    """Run ``subscriber`` until ``done()`` holds, then stop it gracefully."""
    stop = asyncio.Event()
    task = asyncio.create_task(subscriber.run(stop))
    deadline = asyncio.get_running_loop().time() + within_s
    try:
        while not done():
            if task.done():
                task.result()
            assert asyncio.get_running_loop().time() < deadline, subscriber.counts
            await asyncio.sleep(0.1)
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


async def test_duplicates_once_poison_parked_and_the_rest_handled(kafka_bootstrap, topic_factory):
    topic = topic_factory("completions")
    produce(
        kafka_bootstrap,
        topic,
        [
            completion("m1"),
            completion("m1"),  # a replayed batch: the same completion again
            b"\xff\xfe not protobuf",  # undecodable
            completion("m-bad"),  # the handler always fails on it
            completion("m2"),
        ],
    )
    calls: Counter[str] = Counter()

    async def handler(d: Delivery) -> None:
        assert isinstance(d.message, completion_pb2.Completion)
        calls[d.message.message_id] += 1
        if d.message.message_id == "m-bad":
            raise RuntimeError("downstream rejects it")

    group = f"g-{uuid.uuid4().hex[:8]}"
    sub = Subscriber(
        settings(kafka_bootstrap),
        group,
        [topic],
        handler,
        max_attempts=3,
        backoff_initial_s=0.01,
        start="earliest",
    )
    await run_until(sub, lambda: sub.counts["handled"] == 2 and sub.counts["parked"] == 2)
    assert calls == {"m1": 1, "m2": 1, "m-bad": 3}
    assert sub.counts == {"handled": 2, "duplicate": 1, "parked": 2}
    # Graceful stop committed past everything, parked records included.
    assert committed(kafka_bootstrap, group, topic) == [5]
    # In source order (the dead-letter topic may have several partitions).
    parked = sorted(
        read_topic(kafka_bootstrap, f"{group}.deadletter.v1"),
        key=lambda p: dict(p.headers())[PARKED_SOURCE],
    )
    assert len(parked) == 2
    headers = [dict(p.headers()) for p in parked]
    assert [h[PARKED_ERROR_CLASS] for h in headers] == [b"DecodeError", b"RuntimeError"]
    assert [h[PARKED_ATTEMPTS] for h in headers] == [b"0", b"3"]
    assert headers[1][PARKED_SOURCE] == f"{topic}/0@3".encode()
    assert parked[0].value() == b"\xff\xfe not protobuf"


async def test_no_committed_offset_stops_and_says_how_to_choose(kafka_bootstrap, topic_factory):
    topic = topic_factory("completions")
    produce(kafka_bootstrap, topic, [completion("m1")])

    async def handler(d: Delivery) -> None:
        raise AssertionError("nothing may be handled without a start point")

    sub = Subscriber(settings(kafka_bootstrap), f"g-{uuid.uuid4().hex[:8]}", [topic], handler)
    with pytest.raises(StartPointRequiredError, match="headwater offsets reset --group"):
        await asyncio.wait_for(sub.run(asyncio.Event()), 90)


async def test_rebalance_between_two_subscribers_loses_nothing(kafka_bootstrap, topic_factory):
    topic = topic_factory("completions", partitions=2)
    group = f"g-{uuid.uuid4().hex[:8]}"
    handled: Counter[str] = Counter()

    async def handler(d: Delivery) -> None:
        assert isinstance(d.message, completion_pb2.Completion)
        handled[d.message.message_id] += 1

    first = Subscriber(settings(kafka_bootstrap), group, [topic], handler, start="earliest")
    second = Subscriber(settings(kafka_bootstrap), group, [topic], handler, start="earliest")
    wanted = {f"m{i}" for i in range(600)}
    produce(kafka_bootstrap, topic, [completion(f"m{i}") for i in range(300)], partitions=2)
    stop_first, stop_second = asyncio.Event(), asyncio.Event()
    a = asyncio.create_task(first.run(stop_first))
    b: asyncio.Task[None] | None = None
    try:
        deadline = asyncio.get_running_loop().time() + 90
        while len(handled) < 100:
            assert asyncio.get_running_loop().time() < deadline and not a.done()
            await asyncio.sleep(0.1)
        b = asyncio.create_task(second.run(stop_second))  # joins: the group rebalances
        produce(
            kafka_bootstrap, topic, [completion(f"m{i}") for i in range(300, 600)], partitions=2
        )
        while set(handled) != wanted:
            assert asyncio.get_running_loop().time() < deadline + 60, len(handled)
            assert not a.done() and not b.done()  # neither failed
            await asyncio.sleep(0.1)
        stop_first.set()  # leaves: the second takes every partition
        await asyncio.wait_for(a, 30)
        produce(kafka_bootstrap, topic, [completion("m-last-0"), completion("m-last-1")], 2)
        while not {"m-last-0", "m-last-1"} <= set(handled):
            assert asyncio.get_running_loop().time() < deadline + 120, "no takeover"
            await asyncio.sleep(0.1)
    finally:
        stop_first.set()
        stop_second.set()
        await asyncio.gather(a, *([b] if b else []), return_exceptions=True)
    assert wanted | {"m-last-0", "m-last-1"} == set(handled)


def test_an_offset_out_of_the_log_becomes_a_start_point_error():
    # The broker path (a fetch answered OFFSET_OUT_OF_RANGE) cannot be provoked on the
    # embedded broker: it has no DeleteRecords and answers a fetch past the end with
    # nothing. This checks the translation of aiokafka's error, a pure unit.
    error = kafka_errors.OffsetOutOfRangeError({TopicPartition("completions.v1", 2): 1000})
    translated = out_of_range_error("billing", error)
    assert isinstance(translated, StartPointRequiredError)
    message = str(translated)
    assert "completions.v1[2]" in message and "committed offset 1000" in message
    assert "headwater offsets reset --group billing --topic completions.v1" in message
