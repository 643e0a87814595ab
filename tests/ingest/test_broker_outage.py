"""The broker goes away behind a fault proxy: bounded answers, never a false OK, self-healing.

Each test gets its own embedded broker that advertises the proxy's address, so every byte
of every Kafka connection (bootstrap, metadata, produce) goes through the proxy. While
the proxy is cut or stalled no broker ack can reach the service, so any per-message OK
seen then would be a lie; after ``heal()`` the service must recover by itself, and every
message it answered OK must be in Kafka at the partition and offset it reported.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from headwater.ingest.settings import IngestSettings
from headwater.kafka.admin import ensure_topics
from headwater.proto.ingest.v1 import ingest_messages_pb2 as api
from headwater.topics import INGEST_TOPICS, TopicSpec
from headwater_dev.devstack.broker import EmbeddedBroker
from headwater_dev.devstack.ports import free_port
from tests.support.faultproxy import FaultProxy
from tests.support.ingest_ledger import (
    RECOVER_WITHIN_S,
    RETRIABLE_CALL,
    SLACK_S,
    Ledger,
    assert_acked_are_in_kafka,
    assert_failed_retriably,
    assert_within_deadlines,
    publish,
    recover,
)

from .conftest import RunningIngest, bearer

PRODUCE_TIMEOUT_S = 3.0
SERVING = health_pb2.HealthCheckResponse.SERVING


@dataclass
class Broker:
    broker: EmbeddedBroker
    proxy: FaultProxy

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap_servers  # the proxy's address


@pytest.fixture
def broker(tmp_path) -> Iterator[Broker]:
    """A dedicated broker whose advertised listener is a fault proxy in front of it."""
    broker_port = free_port()
    with FaultProxy(target_port=broker_port) as proxy:
        embedded = EmbeddedBroker(
            port=broker_port, advertised_port=proxy.port, log_path=tmp_path / "broker.log"
        )
        with embedded:
            ensure_topics(
                embedded.bootstrap_servers, [TopicSpec(t, 2, 1) for t in INGEST_TOPICS.values()]
            )
            yield Broker(embedded, proxy)


def settings_for(base: IngestSettings, broker: Broker) -> IngestSettings:
    return dataclasses.replace(
        base,
        produce_timeout_seconds=PRODUCE_TIMEOUT_S,
        kafka=dataclasses.replace(base.kafka, bootstrap_servers=broker.bootstrap),
    )


@pytest.fixture
async def service(
    broker: Broker, ingest_settings: IngestSettings, start_ingest: Callable[..., Awaitable]
) -> RunningIngest:
    return await start_ingest(settings_for(ingest_settings, broker))


@pytest.mark.parametrize("fault", ["cut", "stall"])
async def test_batch_calls_end_within_their_deadline_and_never_claim_an_ack(broker, service, fault):
    ledger = Ledger()
    assert (await publish(service, ledger, 10.0))[0] == grpc.StatusCode.OK
    getattr(broker.proxy, fault)()
    # Deadlines shorter and longer than the produce timeout, from concurrent callers.
    outcomes = await asyncio.gather(
        *(publish(service, ledger, d) for d in (1.0, 2.0, 2.5, 6.0, 10.0))
    )
    for code, results in outcomes:
        assert_failed_retriably(code, results)
    # Still failing cleanly a little later (reconnect attempts, stale metadata).
    assert_failed_retriably(*await publish(service, ledger, 2.0))
    assert_within_deadlines(ledger, PRODUCE_TIMEOUT_S)
    ok_before = len(ledger.acked)
    broker.proxy.heal()
    await recover(service, ledger)
    assert len(ledger.acked) > ok_before
    await assert_acked_are_in_kafka(broker.bootstrap, ledger)


@pytest.mark.parametrize("fault", ["cut", "stall"])
async def test_stream_frames_are_answered_in_time_and_never_claim_an_ack(broker, service, fault):
    ledger = Ledger()
    stream = service.stub.StreamTelemetry(metadata=bearer(), timeout=30)
    frames: dict[int, list] = {}

    async def send(frame_id: int) -> None:
        frames[frame_id] = ledger.messages(2)
        await stream.write(api.StreamTelemetryRequest(frame_id=frame_id, messages=frames[frame_id]))

    async def answer() -> api.StreamTelemetryResponse:
        reply = await asyncio.wait_for(stream.read(), PRODUCE_TIMEOUT_S + SLACK_S)
        assert reply is not grpc.aio.EOF
        ledger.record(frames[reply.frame_id], reply.results)
        return reply

    await send(0)
    assert all(r.code == 0 for r in (await answer()).results)
    getattr(broker.proxy, fault)()
    for frame_id in (1, 2, 3):
        await send(frame_id)
    for _ in range(3):
        reply = await answer()  # each frame answered within the produce timeout
        assert reply.frame_id in (1, 2, 3)
        assert_failed_retriably(grpc.StatusCode.OK, list(reply.results))
    broker.proxy.heal()
    # The same stream carries on once the broker is back.
    started, frame_id = time.monotonic(), 10
    while True:
        assert time.monotonic() - started < RECOVER_WITHIN_S, "stream did not recover"
        frame_id += 1
        await send(frame_id)
        if all(r.code == 0 for r in (await answer()).results):
            break
        await asyncio.sleep(0.2)
    await stream.done_writing()
    assert await asyncio.wait_for(stream.read(), 10) is grpc.aio.EOF
    assert await stream.code() == grpc.StatusCode.OK
    await assert_acked_are_in_kafka(broker.bootstrap, ledger)


async def test_flapping_broker_under_load_never_loses_an_acknowledged_message(broker, service):
    """Short and long cuts and stalls under concurrent load: each ack is in Kafka.

    A fault shorter than the callers' deadline is absorbed (aiokafka retries and the call
    ends OK); a longer one fails the calls caught in it. Both must be true to the broker.
    """
    ledger = Ledger()
    stop = asyncio.Event()
    deadline_s = 1.5

    async def caller() -> None:
        while not stop.is_set():
            await publish(service, ledger, deadline_s=deadline_s, n=5)

    callers = [asyncio.create_task(caller()) for _ in range(6)]
    try:
        for fault, lasting_s in (("cut", 0.5), ("stall", 2.5), ("cut", 2.5), ("stall", 0.5)):
            await asyncio.sleep(0.5)  # traffic flows; this schedule is the test's input
            getattr(broker.proxy, fault)()
            await asyncio.sleep(lasting_s)
            broker.proxy.heal()
        await recover(service, ledger)
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*callers), 30)
    assert_within_deadlines(ledger, PRODUCE_TIMEOUT_S)
    codes = {code for _, _, code in ledger.calls}
    assert codes <= RETRIABLE_CALL | {grpc.StatusCode.OK}, codes
    assert codes & RETRIABLE_CALL, "no call failed: the long faults did not bite"
    await assert_acked_are_in_kafka(broker.bootstrap, ledger)


@pytest.mark.parametrize("fault", ["cut", "stall"])
async def test_service_started_during_an_outage_serves_once_the_broker_is_back(
    broker, ingest_settings, start_ingest, fault
):
    getattr(broker.proxy, fault)()
    running = await start_ingest(settings_for(ingest_settings, broker), wait_ready=False)
    health = health_pb2_grpc.HealthStub(running.channel)
    watch = health.Watch(health_pb2.HealthCheckRequest(), timeout=RECOVER_WITHIN_S + 10)
    assert (await watch.read()).status != SERVING
    ledger = Ledger()
    code, _ = await publish(running, ledger, deadline_s=2.0)
    assert code == grpc.StatusCode.UNAVAILABLE  # "not connected yet", with a retry delay
    assert_within_deadlines(ledger, PRODUCE_TIMEOUT_S)
    broker.proxy.heal()
    # Health turns SERVING by itself: an event, awaited with a bound.
    while (await watch.read()).status != SERVING:
        pass
    watch.cancel()
    await recover(running, ledger)
    await assert_acked_are_in_kafka(broker.bootstrap, ledger)
