"""What an ingest service answered under a broker fault, and checks of it against Kafka.

Shared by the fault tests on one broker behind a proxy (tests/ingest/test_broker_outage.py)
and on the three-node cluster (tests/ingest/test_cluster_faults.py): a ``Ledger`` records
every OK with its partition and offset and every call's ending; the checks say that no call
outlived its deadline, that a failure was retriable, and that every OK is in Kafka.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import time
import uuid
from dataclasses import dataclass, field

import grpc
from aiokafka.partitioner import DefaultPartitioner
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from headwater import record_headers as rh
from headwater.kafka.read import read_topic
from headwater.proto.device.v1 import device_message_pb2
from headwater.proto.ingest.v1 import ingest_messages_pb2 as api
from headwater.topics import INGEST_TOPICS
from tests.support.ingest import RunningIngest, bearer, device_message

TOPIC = INGEST_TOPICS["telemetry"]
#: Slack on top of a deadline for scheduling on a loaded machine.
SLACK_S = 1.0
RECOVER_WITHIN_S = 45.0
RETRIABLE_CALL = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED}
RETRIABLE_MESSAGE = {
    grpc.StatusCode.UNAVAILABLE.value[0],
    grpc.StatusCode.DEADLINE_EXCEEDED.value[0],
}


@functools.cache  # every call of a ledger asks again
def devices_over(prefix: str, n: int, partitions: int) -> tuple[str, ...]:
    """``n`` device ids under ``prefix``, the k-th on partition ``k % partitions``.

    Ingest's producer places a record by its key, the device id, with the Java client's
    murmur2 hash (``headwater.kafka.settings.PARTITIONER``; aiokafka's DefaultPartitioner
    computes the same). Ids taken at random would all miss a partition now and then (5 of
    them miss one of 3 partitions 13% of the time), and a fault test waiting for an OK on
    that partition would wait for nothing. With one partition these are ``prefix-0`` to
    ``prefix-<n-1>``.
    """
    hash_of = DefaultPartitioner()
    all_partitions = list(range(partitions))
    wanted = [k % partitions for k in range(n)]
    found: dict[int, list[str]] = {p: [] for p in all_partitions}
    for i in itertools.count():
        if all(len(found[p]) >= wanted.count(p) for p in all_partitions):
            break
        device = f"{prefix}-{i}"
        p = hash_of(device.encode(), all_partitions, all_partitions)
        if len(found[p]) < wanted.count(p):
            found[p].append(device)
    return tuple(found[p].pop(0) for p in wanted)


@dataclass
class Ledger:
    """What the service answered: every OK with its coordinates, every call's ending.

    A call's ``n`` messages go to ``n`` devices spread over ``partitions`` partitions
    (:func:`devices_over`), the same devices in every call.
    """

    devices: str = field(default_factory=lambda: f"acme-outage-{uuid.uuid4().hex[:8]}")
    partitions: int = 1
    acked: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: (seconds taken, deadline, status) of every call.
    calls: list[tuple[float, float, grpc.StatusCode]] = field(default_factory=list)
    #: (monotonic time it ended, seconds taken, messages answered OK) of every call.
    timeline: list[tuple[float, float, int]] = field(default_factory=list)
    #: (monotonic time, partition) of every message answered OK.
    ok_at: list[tuple[float, int]] = field(default_factory=list)
    #: Each message answered OK as it was sent: Kafka must hold exactly this.
    sent: dict[str, device_message_pb2.DeviceMessage] = field(default_factory=dict)

    def messages(self, n: int) -> list:
        return [device_message(d) for d in devices_over(self.devices, n, self.partitions)]

    def record(self, messages: list, results) -> None:
        assert [r.message_id for r in results] == [m.message_id for m in messages]
        now = time.monotonic()
        for message, result in zip(messages, results, strict=True):
            if result.code == 0:
                self.ok_at.append((now, result.partition))
                self.acked[result.message_id] = (result.partition, result.offset)
                self.sent[result.message_id] = message


def retry_delay_of(exc: grpc.aio.AioRpcError) -> float | None:
    status = rpc_status.from_call(exc)
    for detail in status.details if status else ():
        if detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            info = error_details_pb2.RetryInfo()
            detail.Unpack(info)
            return info.retry_delay.ToTimedelta().total_seconds()
    return None


async def publish(
    running: RunningIngest, ledger: Ledger, deadline_s: float, n: int = 3
) -> tuple[grpc.StatusCode, list]:
    """One batch call; record what it answered and how long it took. Never raises."""
    messages = ledger.messages(n)
    started = time.monotonic()
    try:
        response = await running.stub.PublishTelemetry(
            api.PublishTelemetryRequest(messages=messages), metadata=bearer(), timeout=deadline_s
        )
    except grpc.aio.AioRpcError as exc:
        ledger.calls.append((time.monotonic() - started, deadline_s, exc.code()))
        ledger.timeline.append((time.monotonic(), time.monotonic() - started, 0))
        if exc.code() == grpc.StatusCode.UNAVAILABLE:
            # The server said it (not the transport): it says when to come back.
            assert retry_delay_of(exc) is not None, exc
        return exc.code(), []
    ledger.calls.append((time.monotonic() - started, deadline_s, grpc.StatusCode.OK))
    ok = sum(1 for r in response.results if r.code == 0)
    ledger.timeline.append((time.monotonic(), time.monotonic() - started, ok))
    ledger.record(messages, response.results)
    return grpc.StatusCode.OK, list(response.results)


def assert_failed_retriably(code: grpc.StatusCode, results: list) -> None:
    """During a fault: the whole call failed retriably, or every message did."""
    if code != grpc.StatusCode.OK:
        assert code in RETRIABLE_CALL, code
        return
    for result in results:
        assert result.code != 0, f"answered OK without a broker ack: {result}"
        assert result.code in RETRIABLE_MESSAGE and result.error.retriable, result


def assert_within_deadlines(ledger: Ledger, produce_timeout_s: float) -> None:
    """No call outlived its deadline (nor the produce timeout, when that came first)."""
    for elapsed, deadline_s, code in ledger.calls:
        bound = min(deadline_s, produce_timeout_s) + SLACK_S
        assert elapsed < bound, f"a call took {elapsed:.2f}s (deadline {deadline_s}s, {code})"


async def recover(running: RunningIngest, ledger: Ledger) -> float:
    """Call until one succeeds for every message; return how long that took."""
    started = time.monotonic()
    while time.monotonic() - started < RECOVER_WITHIN_S:
        code, results = await publish(running, ledger, deadline_s=5.0)
        if code == grpc.StatusCode.OK and all(r.code == 0 for r in results):
            return time.monotonic() - started
        await asyncio.sleep(0.2)  # a gateway's retry backoff, not synchronization
    raise AssertionError(f"ingest did not recover within {RECOVER_WITHIN_S}s of the heal")


async def assert_acked_are_in_kafka(bootstrap: str, ledger: Ledger) -> None:
    """Every message answered OK is in the topic at the partition and offset it was told,
    exactly as it was sent (none lost, none altered)."""
    assert ledger.acked, "nothing was acknowledged: the test proves nothing"

    def read() -> dict[tuple[int, int], tuple[str, bytes]]:
        return {
            (msg.partition(), msg.offset()): (
                dict(msg.headers() or [])[rh.MESSAGE_ID].decode(),
                msg.value(),
            )
            for msg in read_topic(bootstrap, TOPIC, timeout_s=60)
        }

    def missing(stored: dict[tuple[int, int], tuple[str, bytes]]) -> list[str]:
        return [i for i, at in ledger.acked.items() if stored.get(at, ("",))[0] != i]

    # Read again while some are missing, for a while: just after a fault (a frozen broker
    # resumed, a node back) a read may be told an old end of a partition by a broker that
    # has not caught up yet. An acknowledged message that never shows up fails below.
    stored = await asyncio.to_thread(read)
    deadline = time.monotonic() + 60
    while missing(stored) and time.monotonic() < deadline:
        await asyncio.sleep(2)
        stored = await asyncio.to_thread(read)
    for message_id, coordinates in ledger.acked.items():
        found, value = stored.get(coordinates, ("", b""))
        assert found == message_id, (message_id, coordinates)
        kept = device_message_pb2.DeviceMessage.FromString(value)
        assert kept == ledger.sent[message_id], f"{message_id} altered in Kafka"
