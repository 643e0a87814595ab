"""Each overload limit provoked against the real service: code, details, nothing lost.

Calls are held in flight deterministically by stalling a dedicated broker behind a fault
proxy (no broker ack can arrive, so records stay in the producer's queue); nothing here
depends on how fast the machine is. Every message answered OK is read back from Kafka at
the partition and offset it was given.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import grpc
import pytest
from confluent_kafka import KafkaError
from grpc_health.v1 import health_pb2, health_pb2_grpc

from headwater import record_headers as rh
from headwater.ingest.admission.auth import hash_token
from headwater.ingest.settings import IngestSettings
from headwater.kafka.admin import ensure_topics
from headwater.kafka.read import read_topic
from headwater.proto.ingest.v1 import ingest_messages_pb2 as api
from headwater.topics import INGEST_TOPICS, TopicSpec
from headwater_dev.devstack.broker import EmbeddedBroker
from headwater_dev.devstack.ports import free_port
from tests.support.faultproxy import FaultProxy
from tests.support.ingest import assert_refused

from .conftest import RunningIngest, bearer, details_of, device_message

EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED
TOPIC = INGEST_TOPICS["telemetry"]
#: Long enough that records of a call that timed out are still queued when the next
#: call comes; only the fault proxy's heal ends the wait, not the clock.
PRODUCE_TIMEOUT_S = 20.0
RECOVER_WITHIN_S = 45.0


@dataclasses.dataclass
class Broker:
    broker: EmbeddedBroker
    proxy: FaultProxy

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap_servers  # the proxy's address


@pytest.fixture(scope="module")
def stallable() -> Iterator[Broker]:
    """One broker for this module, every Kafka byte through a fault proxy."""
    broker_port = free_port()
    with FaultProxy(target_port=broker_port) as proxy:
        embedded = EmbeddedBroker(port=broker_port, advertised_port=proxy.port)
        with embedded:
            ensure_topics(
                embedded.bootstrap_servers, [TopicSpec(t, 2, 1) for t in INGEST_TOPICS.values()]
            )
            yield Broker(embedded, proxy)


@pytest.fixture
def broker(stallable: Broker) -> Iterator[Broker]:
    stallable.proxy.heal()
    yield stallable
    stallable.proxy.heal()


def tokens_with(tmp_path: Path, **overrides: int) -> str:
    """A tokens file of gw-a (with ``overrides``) and gw-b (defaults)."""
    extra = "".join(f"\n    {k}: {v}" for k, v in overrides.items())
    path = tmp_path / "tokens-overload.yaml"
    path.write_text(
        f"""
gateways:
  - id: gw-a
    tenant: acme
    token_sha256: {hash_token("token-a")}
    devices: ["*"]{extra}
  - id: gw-b
    tenant: globex
    token_sha256: {hash_token("token-b")}
    devices: ["*"]
"""
    )
    return str(path)


def on(broker: Broker, base: IngestSettings, **changes: object) -> IngestSettings:
    return dataclasses.replace(
        base,
        produce_timeout_seconds=PRODUCE_TIMEOUT_S,
        kafka=dataclasses.replace(base.kafka, bootstrap_servers=broker.bootstrap),
        **changes,
    )


async def publish(
    running: RunningIngest, messages: list, gateway: str = "gw-a", deadline_s: float = 10.0
) -> api.PublishTelemetryResponse:
    return await running.stub.PublishTelemetry(
        api.PublishTelemetryRequest(messages=messages), metadata=bearer(gateway), timeout=deadline_s
    )


async def held_call(running: RunningIngest, messages: list, gateway: str = "gw-a") -> None:
    """A call during the stall: its records stay queued; the call ends without an OK."""
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await publish(running, messages, gateway, deadline_s=1.0)
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED, err.value


async def until_ok(running: RunningIngest, gateway: str = "gw-a") -> dict[str, tuple[int, int]]:
    """After the heal: retry (as a gateway would) until a call is answered OK."""
    started = time.monotonic()
    while time.monotonic() - started < RECOVER_WITHIN_S:
        messages = [device_message(f"acme-ovl-{uuid.uuid4().hex[:6]}") for _ in range(3)]
        try:
            response = await publish(running, messages, gateway, deadline_s=5.0)
        except grpc.aio.AioRpcError as exc:
            assert exc.code() in (EXHAUSTED, grpc.StatusCode.DEADLINE_EXCEEDED), exc
            await asyncio.sleep(0.3)  # a gateway's retry delay, not synchronization
            continue
        assert all(r.code == 0 for r in response.results), response
        return {r.message_id: (r.partition, r.offset) for r in response.results}
    raise AssertionError(f"no OK within {RECOVER_WITHIN_S}s of the heal")


def assert_in_kafka(bootstrap: str, acked: dict[str, tuple[int, int]]) -> None:
    """Every acked message is in the topic at the coordinates it was told."""
    assert acked, "nothing acked: the test proves nothing"
    stored = {
        dict(m.headers() or [])[rh.MESSAGE_ID].decode(): (m.partition(), m.offset())
        for m in read_topic(bootstrap, TOPIC, timeout_s=60)
    }
    for message_id, where in acked.items():
        assert stored.get(message_id) == where, (message_id, where)


async def wait_for(condition: Callable[[], bool], within_s: float = 10.0) -> None:
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < within_s, "condition not reached"
        await asyncio.sleep(0.05)


async def test_process_bound_counts_queued_bytes_and_refuses_before_parsing(
    broker, ingest_settings, start_ingest: Callable[..., Awaitable[RunningIngest]]
):
    budget = 64 * 1024
    running = await start_ingest(
        on(
            broker,
            ingest_settings,
            max_inflight_bytes=budget,
            max_request_bytes=budget,
            gateway_rate_bytes_per_second=0,
            gateway_max_inflight_bytes=0,
        )
    )
    broker.proxy.stall()
    # ~40 KiB whose records stay in the producer's queue after the call has ended.
    await held_call(running, [device_message(payload=b"x" * 4000) for _ in range(10)])
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await publish(running, [device_message(payload=b"y" * 4000) for _ in range(7)])
    assert_refused(
        err.value, "max_inflight_bytes", "ingest-process", "HEADWATER_INGEST_MAX_INFLIGHT_BYTES"
    )
    # Garbage of the same size is refused the same way: admission never parsed it.
    call = running.channel.unary_unary(
        "/headwater.ingest.v1.IngestService/PublishTelemetry",
        request_serializer=lambda b: b,
        response_deserializer=lambda b: b,
    )
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call(b"\xff" * 30_000, metadata=bearer(), timeout=10)
    assert err.value.code() == EXHAUSTED, err.value
    broker.proxy.heal()
    assert_in_kafka(broker.bootstrap, await until_ok(running))


async def test_gateway_in_flight_share_refuses_only_that_gateway(
    broker, ingest_settings, start_ingest, tmp_path
):
    running = await start_ingest(
        on(
            broker,
            ingest_settings,
            tokens_file=tokens_with(tmp_path, max_inflight_bytes=1000),
            gateway_rate_bytes_per_second=0,
        )
    )
    broker.proxy.stall()
    await held_call(running, [device_message(payload=b"x" * 2000)])
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await publish(running, [device_message()])
    assert_refused(
        err.value,
        "gateway_max_inflight_bytes",
        "gateway:gw-a",
        "HEADWATER_INGEST_GATEWAY_MAX_INFLIGHT_BYTES",
    )
    # Another gateway is not refused by gw-a's share: it waits for the broker like anyone.
    await held_call(running, [device_message()], gateway="gw-b")
    broker.proxy.heal()
    assert_in_kafka(broker.bootstrap, await until_ok(running))


async def test_gateway_rate_refuses_with_the_time_to_wait(
    broker, ingest_settings, start_ingest, tmp_path
):
    running = await start_ingest(
        on(broker, ingest_settings, tokens_file=tokens_with(tmp_path, rate_bytes_per_second=100))
    )
    first = await publish(running, [device_message(payload=b"x" * 5000)])
    assert all(r.code == 0 for r in first.results)
    # 5 KB against 100 B/s: the bucket is ~50 s in debt, whatever the machine's speed.
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await publish(running, [device_message()])
    assert_refused(
        err.value,
        "gateway_rate_bytes_per_second",
        "gateway:gw-a",
        "HEADWATER_INGEST_GATEWAY_RATE_BYTES_PER_SECOND",
    )
    assert details_of(err.value)["RetryInfo"].retry_delay.seconds >= 10
    assert details_of(err.value)["QuotaFailure"].violations[0].quota_value == 100
    other = await publish(running, [device_message()], gateway="gw-b")
    acked = {r.message_id: (r.partition, r.offset) for r in [*first.results, *other.results]}
    assert all(r.code == 0 for r in other.results)
    assert_in_kafka(broker.bootstrap, acked)


async def test_a_deadline_too_short_to_meet_is_refused_unstarted(
    broker, ingest_settings, start_ingest
):
    running = await start_ingest(on(broker, ingest_settings, min_deadline_s=5.0))
    refused = device_message()
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await publish(running, [refused], deadline_s=3.0)
    assert_refused(
        err.value, "min_deadline_ms", "ingest-process", "HEADWATER_INGEST_MIN_DEADLINE_SECONDS"
    )
    ok = await publish(running, [device_message()], deadline_s=30.0)
    acked = {r.message_id: (r.partition, r.offset) for r in ok.results}
    assert_in_kafka(broker.bootstrap, acked)
    stored = {
        dict(m.headers())[rh.MESSAGE_ID].decode() for m in read_topic(broker.bootstrap, TOPIC)
    }
    assert refused.message_id not in stored, "a refused call was written"


async def test_a_stream_frame_whose_deadline_is_too_short_is_refused_unwritten(
    broker, ingest_settings, start_ingest
):
    """The deadline is checked per frame too: each frame's own deadline (the frame timeout)."""
    running = await start_ingest(
        on(broker, ingest_settings, min_deadline_s=5.0, stream_frame_timeout_seconds=1.0)
    )
    refused = device_message()
    call = running.stub.StreamTelemetry(metadata=bearer(), timeout=60)
    await call.write(api.StreamTelemetryRequest(frame_id=3, messages=[refused]))
    answer = await asyncio.wait_for(call.read(), 30.0)
    await call.done_writing()
    call.cancel()
    assert answer.frame_id == 3
    assert [r.code for r in answer.results] == [EXHAUSTED.value[0]]
    error = answer.results[0].error
    assert error.reason == "OVERLOADED" and error.retriable, error
    assert "HEADWATER_INGEST_MIN_DEADLINE_SECONDS" in error.message, error
    ok = await publish(running, [device_message()], deadline_s=30.0)
    assert_in_kafka(broker.bootstrap, {r.message_id: (r.partition, r.offset) for r in ok.results})
    stored = {
        dict(m.headers())[rh.MESSAGE_ID].decode() for m in read_topic(broker.bootstrap, TOPIC)
    }
    assert refused.message_id not in stored, "a refused frame was written"


async def test_stream_frames_are_answered_before_the_gateway_frame_timeout(
    broker, ingest_settings, start_ingest
):
    """With the broker stalled, a frame is answered by its own deadline, not the produce's."""
    running = await start_ingest(on(broker, ingest_settings, stream_frame_timeout_seconds=1.0))
    broker.proxy.stall()
    messages = [device_message() for _ in range(3)]
    frame = api.StreamTelemetryRequest(frame_id=7, messages=messages)
    call = running.stub.StreamTelemetry(metadata=bearer(), timeout=60)
    await call.write(frame)
    # 8 s stands for the gateway's frame timeout; the produce timeout (20 s) is far beyond.
    answer = await asyncio.wait_for(call.read(), 8.0)
    assert answer.frame_id == 7
    assert [r.code for r in answer.results] == [grpc.StatusCode.DEADLINE_EXCEEDED.value[0]] * 3
    assert all(r.error.retriable for r in answer.results)
    broker.proxy.heal()
    await call.done_writing()
    call.cancel()
    assert_in_kafka(broker.bootstrap, await until_ok(running))


async def test_call_and_stream_limits_refuse_while_health_answers(
    broker, ingest_settings, start_ingest
):
    running = await start_ingest(on(broker, ingest_settings, max_concurrent_rpcs=2, max_streams=1))
    admission = running.server._servicer._admission  # the real server's own counters
    health = health_pb2_grpc.HealthStub(running.channel)
    stream = running.stub.StreamTelemetry(metadata=bearer(), timeout=60)
    await wait_for(lambda: admission.streams == 1)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await running.stub.StreamAlarms(metadata=bearer(), timeout=10).read()
    assert_refused(err.value, "max_streams", "ingest-process", "HEADWATER_INGEST_MAX_STREAMS")

    broker.proxy.stall()
    held = [
        asyncio.create_task(publish(running, [device_message()], deadline_s=20)) for _ in range(2)
    ]
    await wait_for(lambda: admission.rpcs == 2)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await publish(running, [device_message()])
    assert_refused(
        err.value, "max_concurrent_rpcs", "ingest-process", "HEADWATER_INGEST_MAX_CONCURRENT_RPCS"
    )
    for _ in range(5):  # health is never counted against the limits
        reply = await health.Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
    broker.proxy.heal()
    acked: dict[str, tuple[int, int]] = {}
    for response in await asyncio.gather(*held):  # the held calls end OK once acked
        acked |= {r.message_id: (r.partition, r.offset) for r in response.results if r.code == 0}
    stream.cancel()
    acked |= await until_ok(running)
    assert_in_kafka(broker.bootstrap, acked)


async def test_a_fatal_producer_error_releases_the_bytes_of_every_unacknowledged_record(
    broker, ingest_settings, start_ingest
):
    """Issue 22: the replacement flushes for 1 s only; what is left must not leak budget."""
    running = await start_ingest(on(broker, ingest_settings))
    admission = running.server._servicer._admission
    writer = running.server.writer
    broker.proxy.stall()
    await held_call(running, [device_message(payload=b"x" * 4000) for _ in range(10)])
    assert admission.in_use > 0
    assert admission.quotas.inflight_by_gateway()["gw-a"] > 0
    fatal = KafkaError(KafkaError._FATAL, "injected: idempotent producer fatal error", fatal=True)
    await asyncio.to_thread(writer.error_callback, fatal)  # from the poll thread, as librdkafka
    # The dead producer is stopped (1 s flush) while the broker is still stalled: every
    # record it held fails retriable and gives its bytes back.
    await wait_for(lambda: admission.in_use == 0, within_s=15)
    assert admission.quotas.inflight_by_gateway()["gw-a"] == 0
    broker.proxy.heal()
    await running.server.ready(within_s=RECOVER_WITHIN_S)  # the replacement producer
    assert_in_kafka(broker.bootstrap, await until_ok(running))


async def test_a_call_cancelled_while_waiting_for_acks_keeps_its_bytes_counted(
    broker, ingest_settings, start_ingest
):
    """A gateway that gives up mid-call frees no bytes its records still hold in the producer."""
    running = await start_ingest(on(broker, ingest_settings))
    admission = running.server._servicer._admission
    broker.proxy.stall()
    call = asyncio.create_task(
        publish(running, [device_message(payload=b"x" * 4000)], deadline_s=30)
    )
    await wait_for(lambda: admission.in_use > 0)  # admitted; its record is sent, unacked
    call.cancel()  # the gateway goes away: gRPC cancels the server's handler
    with contextlib.suppress(asyncio.CancelledError):
        await call
    await wait_for(lambda: admission.rpcs == 0)  # the handler has ended
    assert admission.in_use > 0, "the cancelled call's bytes were freed while still queued"
    broker.proxy.heal()
    await wait_for(lambda: admission.in_use == 0, within_s=15)  # the ack releases them
