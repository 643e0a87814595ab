"""Broker outages through a fault proxy: bounded answers, never a false OK, self-healing."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import grpc
import pytest

from headwater.devstack.broker import EmbeddedBroker, free_port
from headwater.kafka_admin import ensure_topics
from headwater.proto.ingest.v1 import ingest_messages_pb2 as api
from headwater.topics import INGEST_TOPICS, TopicSpec

from ..tcp_fault_proxy import FaultProxy
from .conftest import bearer, device_message

RETRIABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED}


@pytest.fixture
def proxied(tmp_path):
    """A broker that advertises a fault proxy's address, so every byte goes through it."""
    proxy_port = free_port()
    broker = EmbeddedBroker(advertised_port=proxy_port, log_path=tmp_path / "broker.log")
    broker.start()
    proxy = FaultProxy(proxy_port, broker.port).start()
    ensure_topics(broker.bootstrap_servers, [TopicSpec(t, 2, 1) for t in INGEST_TOPICS.values()])
    yield broker, proxy
    proxy.stop()
    broker.stop()


@pytest.fixture
async def outage_ingest(proxied, ingest_settings, start_ingest):
    broker, proxy = proxied
    settings = dataclasses.replace(
        ingest_settings,
        produce_timeout_seconds=3.0,
        kafka=dataclasses.replace(
            ingest_settings.kafka, bootstrap_servers=broker.bootstrap_servers
        ),
    )
    return await start_ingest(settings), proxy, broker


async def call(stub, deadline_s: float):
    """One publish: (elapsed, code, results) where code is the whole-call status."""
    messages = [device_message(f"acme-{i}") for i in range(3)]
    started = time.monotonic()
    try:
        response = await stub.PublishTelemetry(
            api.PublishTelemetryRequest(messages=messages), metadata=bearer(), timeout=deadline_s
        )
    except grpc.aio.AioRpcError as exc:
        return time.monotonic() - started, exc.code(), []
    return (
        time.monotonic() - started,
        grpc.StatusCode.OK,
        list(zip(messages, response.results, strict=True)),
    )


async def recover(stub, acked, within_s: float = 45) -> None:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        _, code, results = await call(stub, 5)
        if code == grpc.StatusCode.OK and all(r.code == 0 for _, r in results):
            acked += results
            return
        await asyncio.sleep(0.5)
    raise AssertionError(f"ingest did not recover within {within_s}s after the broker came back")


def assert_in_kafka(read_record, acked) -> None:
    for msg, result in acked:
        record = read_record("ingest.telemetry.v1", result.partition, result.offset)
        assert dict(record.headers())["message-id"] == msg.message_id.encode()


@pytest.mark.parametrize("fault", ["cut", "stall"])
async def test_calls_end_within_their_deadline_and_never_ok_without_an_ack(
    outage_ingest, fault, kafka_bootstrap, read_record_at
):
    running, proxy, broker = outage_ingest
    acked = []
    _, code, results = await call(running.stub, 5)
    assert code == grpc.StatusCode.OK
    acked += results
    getattr(proxy, fault)()
    for deadline_s in (2.0, 4.0, 2.0):
        elapsed, code, results = await call(running.stub, deadline_s)
        assert elapsed < deadline_s + 1.0, f"{fault}: call took {elapsed:.1f}s past {deadline_s}s"
        if code == grpc.StatusCode.OK:  # per-message answers: none may claim success
            assert all(r.code != 0 and r.error.retriable for _, r in results), results
        else:
            assert code in RETRIABLE, code
    proxy.heal()
    await recover(running.stub, acked)
    assert_in_kafka(read_record_at(broker.bootstrap_servers), acked)


async def test_ingest_started_during_an_outage_serves_once_the_broker_is_back(
    proxied, ingest_settings, start_ingest, read_record_at
):
    broker, proxy = proxied
    proxy.cut()
    settings = dataclasses.replace(
        ingest_settings,
        produce_timeout_seconds=3.0,
        kafka=dataclasses.replace(
            ingest_settings.kafka, bootstrap_servers=broker.bootstrap_servers
        ),
    )
    running = await start_ingest(settings, wait_ready=False)
    _, code, _ = await call(running.stub, 2)
    assert code == grpc.StatusCode.UNAVAILABLE
    proxy.heal()
    acked = []
    await recover(running.stub, acked)
    assert_in_kafka(read_record_at(broker.bootstrap_servers), acked)
