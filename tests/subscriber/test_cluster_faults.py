"""The subscriber on a three-node cluster while the leader of its partitions is killed.

Records are written throughout (``acks=all``, idempotent, as ingest and the enricher write)
while a subscriber reads them; the node leading partition 0 is SIGKILLed mid-stream.
Every acknowledged record must reach the handler once (at least once; the dedup store
absorbs what comes again, at most what was handled and not yet committed); no offset is
reset (the group ends committed at each partition's end); the move is told in one line per
partition. Bounded: loopback only, a bounded count and time; the cluster is healed after
(fixture ``cluster``).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
from collections import Counter

import pytest
from confluent_kafka import Producer

from headwater.kafka.admin import ensure_topics
from headwater.kafka.settings import KafkaSettings
from headwater.proto.events.v1 import completion_pb2
from headwater.subscriber import Delivery, Subscriber, decode_completion
from headwater.topics import TopicSpec
from headwater_dev.devstack.cluster import BrokerCluster

from .conftest import committed, completion, sub_settings

pytestmark = pytest.mark.cluster
PARTITIONS = 3
RATE_PER_S = 200
#: Records handled before the kill (at the rate, in seconds), and writing after it (the
#: election takes ~9 s).
BEFORE_S, AFTER_S = 3.0, 15.0
CATCH_UP_WITHIN_S = 120.0


class Writer:
    """Writes completions round-robin over the partitions until stopped; keeps the acked ids."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.acked: set[str] = set()
        self.failed: list[str] = []
        self.unflushed = 0
        self._stop = threading.Event()
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "message.timeout.ms": 60_000,  # retried across the election
                "log_level": 0,
            }
        )
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            message_id = f"m{n:06d}"
            value = completion(message_id)
            self._producer.produce(
                self.topic,
                value,
                key=message_id.encode(),
                partition=n % PARTITIONS,
                on_delivery=lambda err, msg, mid=message_id: self._note(err, mid),
            )
            self._producer.poll(0)
            n += 1
            time.sleep(1 / RATE_PER_S)
        self.unflushed = self._producer.flush(90)

    def _note(self, err, message_id: str) -> None:
        if err is None:
            self.acked.add(message_id)
        else:
            self.failed.append(f"{message_id}: {err}")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(120)


async def test_subscriber_across_a_leader_kill_loses_nothing_and_resets_no_offset(
    cluster: BrokerCluster, cluster_topic_factory, caplog
) -> None:
    caplog.set_level(logging.INFO, logger="headwater.subscriber")
    topic = cluster_topic_factory("completions", PARTITIONS)
    group = f"g-{topic.rsplit('.', 1)[1]}"
    ensure_topics(cluster.bootstrap_servers, [TopicSpec(f"{group}.deadletter.v1", 1, 3)])
    seen: Counter[str] = Counter()
    handled_at: list[float] = []

    async def handler(d: Delivery[completion_pb2.Completion]) -> None:
        seen[d.message.message_id] += 1
        handled_at.append(time.monotonic())

    settings = sub_settings(group, (topic,), start="earliest")
    sub = Subscriber(
        KafkaSettings(bootstrap_servers=cluster.bootstrap_servers),
        settings,
        handler,
        decode_completion,
    )
    stop = asyncio.Event()
    task = asyncio.create_task(sub.run(stop))
    writer = Writer(cluster.bootstrap_servers, topic)
    writer.start()
    try:
        # The subscriber reads every partition (it knows their leaders) before the kill:
        # a join slowed by a loaded machine must not start after it.
        deadline = time.monotonic() + 60
        while len(seen) < RATE_PER_S * BEFORE_S:
            assert not task.done(), f"the subscriber stopped: {task.exception()!r}"
            assert time.monotonic() < deadline, f"only {len(seen)} handled in 60 s"
            await asyncio.sleep(0.1)
        leader = cluster.leader_of(topic, 0)
        led = [p for p in range(PARTITIONS) if cluster.leader_of(topic, p) is leader]
        killed_at = time.monotonic()
        await asyncio.to_thread(leader.kill)
        await asyncio.sleep(AFTER_S)
        await asyncio.to_thread(writer.stop)
        deadline = time.monotonic() + CATCH_UP_WITHIN_S
        while not writer.acked <= set(seen):
            assert not task.done(), f"the subscriber stopped: {task.exception()!r}"
            assert time.monotonic() < deadline, f"{len(writer.acked - set(seen))} never handled"
            await asyncio.sleep(0.2)
    finally:
        writer.stop()
        stop.set()
        await asyncio.wait_for(task, 60)
    assert not writer.failed and not writer.unflushed, (writer.failed[:5], writer.unflushed)
    assert set(seen) == writer.acked  # nothing lost, nothing invented
    assert max(seen.values()) == 1  # the dedup store absorbed what came again
    # What came again is at most what was handled and not yet committed at the move (a
    # batch per partition); a reset to the start would bring everything again.
    assert sub.counts["duplicate"] <= settings.max_batch * PARTITIONS, sub.counts
    assert sum(committed(cluster.bootstrap_servers, group, topic, PARTITIONS)) == len(
        writer.acked
    ), "committed offsets are not at the partitions' ends"
    moves = [r for r in caplog.records if r.getMessage() == "Kafka partition leader moved"]
    moved = Counter(r.partition for r in moves)  # type: ignore[attr-defined]
    assert moved == Counter({f"{topic}[{p}]": 1 for p in led}), moved
    gaps = [b - a for a, b in itertools.pairwise(handled_at) if b > killed_at]
    print(
        f"\nsubscriber across a leader kill (node {leader.node_id}, partitions {led}): "
        f"{len(writer.acked)} records, 0 lost, {sub.counts['duplicate']} redelivered and "
        f"absorbed, longest pause in handling {max(gaps):.1f}s, committed at the ends"
    )
