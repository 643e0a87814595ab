"""Per-device order (issue 23): a device's messages reach Kafka in the order they were sent.

Frames in flight at once on one stream (the gateway library's window), and a gateway
library draining a backlog, are read back from the partition: zero inversions.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
from confluent_kafka import Consumer, TopicPartition

from headwater.gateway import GatewayClient, NewMessage, Spool
from headwater.proto.device.v1 import device_message_pb2
from headwater.proto.ingest.v1 import ingest_messages_pb2 as api
from headwater.topics import INGEST_TOPICS

from ..gateway.conftest import CT, config
from .conftest import bearer, device_message

TOPIC = INGEST_TOPICS["telemetry"]


def read_back(
    bootstrap: str, where: dict[int, tuple[int, int]]
) -> list[device_message_pb2.DeviceMessage]:
    """The records of each partition between the offsets given, in partition order."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"order-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
        }
    )
    out: list[device_message_pb2.DeviceMessage] = []
    try:
        for partition, (first, last) in sorted(where.items()):
            consumer.assign([TopicPartition(TOPIC, partition, first)])
            deadline = time.monotonic() + 30
            offset = first - 1
            while offset < last:
                assert time.monotonic() < deadline, f"partition {partition} not read to {last}"
                msg = consumer.poll(0.5)
                if msg is None or msg.error():
                    continue
                offset = msg.offset()
                out.append(device_message_pb2.DeviceMessage.FromString(msg.value()))
    finally:
        consumer.close()
    return out


def inversions(messages: list[device_message_pb2.DeviceMessage], devices: set[str]) -> int:
    """Messages of a device stored after one with a higher sequence."""
    highest: dict[str, int] = defaultdict(int)
    count = 0
    for m in messages:
        if m.device_id not in devices:
            continue
        if m.sequence < highest[m.device_id]:
            count += 1
        highest[m.device_id] = max(highest[m.device_id], m.sequence)
    return count


def span_of(results: list[api.MessageResult]) -> dict[int, tuple[int, int]]:
    where: dict[int, tuple[int, int]] = {}
    for r in results:
        assert r.code == 0, r
        first, last = where.get(r.partition, (r.offset, r.offset))
        where[r.partition] = (min(first, r.offset), max(last, r.offset))
    return where


async def stream_frames(ingest, frames: list[list[device_message_pb2.DeviceMessage]]):
    async def requests() -> AsyncIterator[api.StreamTelemetryRequest]:
        # Back to back: every frame is in flight before the first answer is read.
        for i, messages in enumerate(frames):
            yield api.StreamTelemetryRequest(frame_id=i + 1, messages=messages)

    answers = [
        a async for a in ingest.stub.StreamTelemetry(requests(), metadata=bearer(), timeout=60)
    ]
    assert sorted(a.frame_id for a in answers) == list(range(1, len(frames) + 1))
    return [r for a in answers for r in a.results]


async def test_frames_in_flight_for_one_device_keep_its_order(ingest, kafka_bootstrap):
    device = f"acme-order-{uuid.uuid4().hex[:8]}"
    frames = [
        [device_message(device, sequence=f * 100 + i + 1) for i in range(100)] for f in range(8)
    ]
    results = await stream_frames(ingest, frames)
    assert len(results) == 800
    stored = read_back(kafka_bootstrap, span_of(results))
    mine = [m for m in stored if m.device_id == device]
    assert len(mine) == 800
    assert inversions(mine, {device}) == 0
    assert [m.sequence for m in mine] == list(range(1, 801))


async def test_devices_interleaved_across_frames_each_keep_their_order(ingest, kafka_bootstrap):
    devices = [f"acme-mix-{uuid.uuid4().hex[:8]}" for _ in range(5)]
    sequence = dict.fromkeys(devices, 0)
    frames = []
    for _ in range(8):
        frame = []
        for i in range(100):
            device = devices[(i * 3 + len(frames)) % len(devices)]
            sequence[device] += 1
            frame.append(device_message(device, sequence=sequence[device]))
        frames.append(frame)
    results = await stream_frames(ingest, frames)
    stored = read_back(kafka_bootstrap, span_of(results))
    mine = [m for m in stored if m.device_id in set(devices)]
    assert len(mine) == 800
    assert inversions(mine, set(devices)) == 0


async def test_the_gateway_library_draining_a_backlog_keeps_each_devices_order(
    ingest, kafka_bootstrap, tmp_path: Path
):
    devices = [f"acme-spool-{uuid.uuid4().hex[:8]}" for _ in range(3)]
    delivered: list[tuple[int, int]] = []
    with Spool(tmp_path / "spool.db") as spool:
        for _ in range(10):  # the backlog: 3,000 messages spooled before the link is up
            spool.enqueue_many(
                "telemetry", [NewMessage(devices[i % 3], CT, b'{"temp_c": 1}') for i in range(300)]
            )

        def report(outcome) -> None:
            if outcome.status == "delivered":
                delivered.append((outcome.partition, outcome.offset))

        client = GatewayClient(
            spool, config(ingest.target, frame_messages=500, window_frames=8), report
        )
        async with client:
            assert await client.drain(within_s=90)
    assert len(delivered) == 3000
    where: dict[int, tuple[int, int]] = {}
    for partition, offset in delivered:
        first, last = where.get(partition, (offset, offset))
        where[partition] = (min(first, offset), max(last, offset))
    stored = [m for m in read_back(kafka_bootstrap, where) if m.device_id in set(devices)]
    assert len(stored) == 3000
    assert inversions(stored, set(devices)) == 0
    for device in devices:
        assert [m.sequence for m in stored if m.device_id == device] == list(range(1, 1001))


async def test_frames_behind_a_refused_frame_are_refused_too_until_its_retry_delay(ingest):
    """A refused frame is resent later: what the gateway sent behind it must not go first."""
    admission = ingest.server._servicer._admission  # the real server's own books
    device = f"acme-held-{uuid.uuid4().hex[:8]}"
    big = [device_message(device, payload=b"x" * 1000, sequence=i + 1) for i in range(30)]
    small = [device_message(device, sequence=31)]
    requests: asyncio.Queue[api.StreamTelemetryRequest | None] = asyncio.Queue()

    async def frames() -> AsyncIterator[api.StreamTelemetryRequest]:
        while (request := await requests.get()) is not None:
            yield request

    call = ingest.stub.StreamTelemetry(frames(), metadata=bearer(), timeout=30)
    # Room for the small frame but not the large one, as if other calls held the rest.
    admission.in_use = admission.max_bytes - 20_000
    try:
        requests.put_nowait(api.StreamTelemetryRequest(frame_id=1, messages=big))
        requests.put_nowait(api.StreamTelemetryRequest(frame_id=2, messages=small))
        answers = {a.frame_id: a for a in [await call.read(), await call.read()]}
    finally:
        admission.in_use = 0
    for frame_id in (1, 2):
        codes = {r.code for r in answers[frame_id].results}
        assert codes == {grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]}, answers[frame_id]
        assert all(r.error.reason == "OVERLOADED" for r in answers[frame_id].results)
    delay = answers[2].results[0].error.retry_delay.ToMilliseconds()
    assert 0 < delay <= 250
    await asyncio.sleep(0.3)  # the gateway waits out the RetryInfo delay, then resends in order
    requests.put_nowait(api.StreamTelemetryRequest(frame_id=3, messages=big + small))
    resent = await call.read()
    assert [r.code for r in resent.results] == [0] * 31
    offsets = [r.offset for r in resent.results]
    assert offsets == sorted(offsets) and len({r.partition for r in resent.results}) == 1
    requests.put_nowait(None)
