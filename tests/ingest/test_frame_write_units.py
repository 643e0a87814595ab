"""The frame write path on the event loop alone (write/frames.py): a stand-in writer, no broker.

The single-message path issues its records without awaiting (``RecordWriter.send_now``);
these provoke what makes a request wait instead: a full producer queue part-way through a
frame, a writer that can only send by awaiting, an earlier request of the gateway still
issuing, and acks that never come before the deadline.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider

from headwater import wire
from headwater.endpoints import ENDPOINTS
from headwater.ingest.admission.auth import ANONYMOUS
from headwater.ingest.admission.limits import Admission
from headwater.ingest.admission.ordering import IssueOrder
from headwater.ingest.errors import BrokerTimeoutError
from headwater.ingest.metrics import IngestMetrics
from headwater.ingest.settings import IngestSettings
from headwater.ingest.write.frames import FrameWriter
from headwater.ingest.writers.protocol import Delivered
from headwater.proto.device.v1 import device_message_pb2
from headwater_dev.bench.ingest_bench import make_records
from tests.support.waiting import until

EP = ENDPOINTS[0]


class StandInWriter:
    """Records in send order; acks them when told. ``room``: sends until the queue is full."""

    connected = True

    def __init__(self, room: int | None = None, awaits_only: bool = False) -> None:
        self.keys: list[bytes] = []
        self.futures: list[asyncio.Future[Delivered]] = []
        self.room = room
        self.awaits_only = awaits_only
        self.waited = 0  # sends that had to go through send()
        self.room_freed = asyncio.Event()

    def send_now(
        self, topic: str, key: bytes, value: bytes, headers: Sequence[tuple[str, bytes]]
    ) -> asyncio.Future[Delivered] | None:
        if self.awaits_only or self.room == 0:
            return None
        if self.room is not None:
            self.room -= 1
        future: asyncio.Future[Delivered] = asyncio.get_running_loop().create_future()
        self.keys.append(key)
        self.futures.append(future)
        return future

    async def send(
        self, topic: str, key: bytes, value: bytes, headers: Sequence[tuple[str, bytes]]
    ) -> asyncio.Future[Delivered]:
        self.waited += 1
        if self.room == 0:  # the queue drains as acks come in
            self.room_freed.clear()
            await self.room_freed.wait()
        awaits_only, self.awaits_only = self.awaits_only, False
        future = self.send_now(topic, key, value, headers)
        self.awaits_only = awaits_only
        assert future is not None
        return future

    def make_room(self, records: int) -> None:
        self.room = (self.room or 0) + records
        self.room_freed.set()

    def ack_all(self) -> None:
        for offset, future in enumerate(self.futures):
            if not future.done():
                future.set_result(Delivered(EP.topic, 0, offset))

    async def ack_soon(self, count: int) -> None:
        """Ack ``count`` records as they are sent, freeing queue room for each."""
        while count:
            await asyncio.sleep(0.001)
            for future in self.futures:
                if not future.done():
                    future.set_result(Delivered(EP.topic, 0, 0))
                    count -= 1
                    self.make_room(1)


def frame_writer(writer: StandInWriter) -> FrameWriter:
    settings = IngestSettings(allow_unauthenticated=True)
    metrics = IngestMetrics(MeterProvider().get_meter("test"))
    return FrameWriter(settings, writer, Admission(settings), trace.NoOpTracer(), metrics)


def publish_request(count: int) -> bytes:
    return b"".join(wire.length_field(1, value) for _, value, _ in make_records(count, 20))


async def write(fw: FrameWriter, order: IssueOrder, count: int, time_left: float = 5.0):
    place = order.join(ANONYMOUS.gateway_id)
    return await fw.write(
        EP, publish_request(count), wire.publish_deserializer, ANONYMOUS, time_left, place
    )


async def test_a_full_queue_part_way_waits_for_room_and_keeps_the_order():
    writer = StandInWriter(room=3)
    fw, order = frame_writer(writer), IssueOrder()
    acks = asyncio.create_task(writer.ack_soon(40))
    frame, results = await write(fw, order, 40)
    await acks
    assert [r.code for r in results] == [0] * 40
    assert writer.waited >= 1, "the full queue was never hit"
    sent_ids = [m.message_id for m in results]
    assert sent_ids == [wire_id(raw) for raw in frame.messages], "records left out of order"
    assert len(order) == 0 and fw.inflight_requests == 0


async def test_a_writer_that_only_sends_by_awaiting_writes_every_message():
    writer = StandInWriter(awaits_only=True)
    fw, order = frame_writer(writer), IssueOrder()
    task = asyncio.create_task(write(fw, order, 3))
    await until(lambda: len(writer.futures) == 3, 10, "three records sent")
    writer.ack_all()
    _, results = await task
    assert [r.code for r in results] == [0, 0, 0] and writer.waited == 3


async def test_a_single_message_waits_for_an_earlier_request_of_its_gateway_to_issue():
    writer = StandInWriter(room=0)  # the first request's records wait for room
    fw, order = frame_writer(writer), IssueOrder()
    first = asyncio.create_task(write(fw, order, 2))
    await asyncio.sleep(0.01)
    second = asyncio.create_task(write(fw, order, 1))
    await asyncio.sleep(0.01)
    assert writer.keys == [], "the later request was issued before the earlier one"
    writer.make_room(10)
    await until(lambda: len(writer.futures) == 3, 10, "three records sent")
    writer.ack_all()
    (first_frame, _), (second_frame, _) = await first, await second
    expected = [wire_key(raw) for raw in [*first_frame.messages, *second_frame.messages]]
    assert writer.keys == expected


async def test_acks_that_never_come_answer_a_timeout_at_the_deadline_and_keep_the_bytes():
    writer = StandInWriter()
    fw, order = frame_writer(writer), IssueOrder()
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(BrokerTimeoutError):
        await write(fw, order, 1, time_left=0.2)
    waited = loop.time() - started
    assert 0.15 <= waited < 3.0, waited
    assert len(order) == 0, "the turn was not handed on"
    # The record is still in the producer: its bytes stay counted until its outcome.
    admission = fw._admission
    assert admission.in_use > 0
    writer.ack_all()
    await asyncio.sleep(0)
    assert admission.in_use == 0


def wire_id(raw: bytes) -> str:
    return device_message_pb2.DeviceMessage.FromString(raw).message_id


def wire_key(raw: bytes) -> bytes:
    return device_message_pb2.DeviceMessage.FromString(raw).device_id.encode()
