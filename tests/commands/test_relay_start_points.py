"""The relay never resets its offsets by itself (real ingest, real broker, Kafka's DeleteRecords).

A group that never committed starts at the log's beginning (every report is relayed); a
committed offset that retention deleted past stops the relay with one error line naming
the command that moves on, and nothing else of ingest stops.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import time
import uuid
from pathlib import Path

import grpc
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from grpc_health.v1 import health_pb2, health_pb2_grpc

from headwater.kafka.settings import KafkaSettings
from headwater.topics import COMMAND_REPORTS_TOPIC
from tests.support.waiting import until

from .conftest import _start_group_at_end

pytestmark = pytest.mark.timeout(120)


def committed(kafka: KafkaSettings, group: str, partition: int) -> int:
    consumer = Consumer(kafka.consumer_config("test", group))
    try:
        (tp,) = consumer.committed([TopicPartition(COMMAND_REPORTS_TOPIC, partition)], timeout=10)
        return int(tp.offset)
    finally:
        consumer.close()


def trim_to(kafka: KafkaSettings, offsets: dict[int, int]) -> None:
    """Delete the reports below ``offsets`` per partition, as retention does."""
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    futures = admin.delete_records(
        [TopicPartition(COMMAND_REPORTS_TOPIC, p, o) for p, o in offsets.items()]
    )
    for tp, future in futures.items():
        assert future.result(timeout=30).low_watermark == offsets[tp.partition]


def ends(kafka: KafkaSettings) -> dict[int, int]:
    consumer = Consumer(kafka.consumer_config("test", "watermarks"))
    try:
        partitions = consumer.list_topics(COMMAND_REPORTS_TOPIC, timeout=10)
        return {
            p: consumer.get_watermark_offsets(TopicPartition(COMMAND_REPORTS_TOPIC, p), 10)[1]
            for p in partitions.topics[COMMAND_REPORTS_TOPIC].partitions
        }
    finally:
        consumer.close()


async def test_a_lost_offset_stops_the_relay_loudly_and_a_new_group_starts_at_the_beginning(
    command_topics, start_command_ingest, caplog
):
    kafka = command_topics.kafka
    lost, new = f"relay-lost-{uuid.uuid4().hex[:8]}", f"relay-new-{uuid.uuid4().hex[:8]}"
    # The reports topic is shared by the tests (each relay group starts at its end): emptied
    # here, so what is left in it is this test's.
    start = await asyncio.to_thread(ends, kafka)
    await asyncio.to_thread(trim_to, kafka, start)
    await asyncio.to_thread(_start_group_at_end, kafka, COMMAND_REPORTS_TOPIC, lost)
    # Three reports to partition 0 (not reports a gateway could send: the relay drops
    # them, and commits past them); retention then takes the first two, which the group
    # `lost` had not relayed.
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers})
    for i in range(3):
        producer.produce(COMMAND_REPORTS_TOPIC, b"not a report %d" % i, partition=0)
    assert producer.flush(30) == 0
    p0 = start[0]
    await asyncio.to_thread(trim_to, kafka, {0: p0 + 2})

    caplog.set_level(logging.INFO, logger="headwater.ingest.commands")
    ingest = await start_command_ingest(relay_group=lost)
    await until(lambda: "command relay stopped" in caplog.text, 60, "the relay stopped")
    (line,) = [r for r in caplog.records if "command relay stopped" in r.getMessage()]
    assert line.levelno == logging.ERROR
    message = line.getMessage()
    where = f"{COMMAND_REPORTS_TOPIC}[0]: the committed offset {p0} is before the log start"
    assert f"{where} {p0 + 2}" in message
    assert (
        f"headwater offsets reset --group {lost} --topic {COMMAND_REPORTS_TOPIC} --to earliest"
        in message
    )
    assert "\n" not in message
    # Stopped, not retried: no second line, and the group's offset is left where it was.
    await asyncio.sleep(2)
    assert sum("command relay" in r.getMessage() for r in caplog.records) == 1
    assert await asyncio.to_thread(committed, kafka, lost, 0) == p0
    # Ingest itself keeps serving.
    async with grpc.aio.insecure_channel(f"127.0.0.1:{ingest.port}") as channel:
        health = health_pb2_grpc.HealthStub(channel)
        answer = await health.Check(health_pb2.HealthCheckRequest(), timeout=5)
    assert answer.status == health_pb2.HealthCheckResponse.SERVING

    # The remedy the line names works once the relay has left the group.
    reset = [
        *(str(Path(sys.executable).parent / "headwater"), "offsets", "reset", "--group", lost),
        *("--topic", COMMAND_REPORTS_TOPIC, "--to", "earliest", "--execute"),
        *("--bootstrap-servers", kafka.bootstrap_servers),
    ]
    done = await asyncio.to_thread(subprocess.run, reset, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert await asyncio.to_thread(committed, kafka, lost, 0) == p0 + 2

    # A group that never committed reads from the log start: the one report left.
    await start_command_ingest(relay_group=new)
    deadline = time.monotonic() + 60
    while (at := await asyncio.to_thread(committed, kafka, new, 0)) != p0 + 3:
        assert time.monotonic() < deadline, f"the new group's relay committed {at}, not {p0 + 3}"
        await asyncio.sleep(0.2)
