"""Fair share per gateway (issue 23): one gateway cannot take every slot of a replica.

Gateway A holds its maximum of silent streams (and of publish calls whose body never
comes); it is refused beyond them with a QuotaFailure naming its own limit, while
gateway B still opens streams and publishes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from headwater.ingest.admission.auth import hash_token
from headwater.proto.ingest.v1 import ingest_messages_pb2 as api

from .conftest import bearer, details_of, device_message

PUBLISH = "/headwater.ingest.v1.IngestService/PublishTelemetry"


async def wait_for(condition: Callable[[], bool], within_s: float = 10.0) -> None:
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < within_s, "condition not reached"
        await asyncio.sleep(0.02)


def assert_gateway_refused(exc: grpc.aio.AioRpcError, limit: str, value: int) -> None:
    assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, exc
    details = details_of(exc)
    assert details["ErrorInfo"].reason == "OVERLOADED"
    assert details["RetryInfo"].retry_delay.ToNanoseconds() > 0
    (violation,) = details["QuotaFailure"].violations
    assert (violation.quota_id, violation.subject, violation.quota_value) == (
        limit,
        "gateway:gw-a",
        value,
    )


@pytest.fixture
def fair_settings(ingest_settings, tmp_path: Path):
    tokens = tmp_path / "tokens-fair.yaml"
    tokens.write_text(
        f"""
gateways:
  - id: gw-a
    tenant: acme
    token_sha256: {hash_token("token-a")}
    devices: ["acme-*"]
    max_streams: 3          # tokens-file override of HEADWATER_INGEST_GATEWAY_MAX_STREAMS
  - id: gw-b
    tenant: globex
    token_sha256: {hash_token("token-b")}
    devices: ["globex-*"]
"""
    )
    # The process could hold 4 streams and 3 calls: without per-gateway caps, A alone
    # could take all of them.
    return dataclasses.replace(
        ingest_settings,
        tokens_file=str(tokens),
        max_streams=4,
        max_concurrent_rpcs=3,
        gateway_max_concurrent_rpcs=1,
    )


async def test_a_gateway_holding_its_silent_streams_leaves_room_for_the_others(
    fair_settings, start_ingest
):
    running = await start_ingest(fair_settings)
    admission = running.server._servicer._admission  # the real server's own counters
    silent = [running.stub.StreamTelemetry(metadata=bearer("gw-a"), timeout=60) for _ in range(3)]
    await wait_for(lambda: admission.streams_by_gateway.get("gw-a") == 3)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await running.stub.StreamAlarms(metadata=bearer("gw-a"), timeout=10).read()
    assert_gateway_refused(err.value, "gateway_max_streams", 3)
    assert "HEADWATER_INGEST_GATEWAY_MAX_STREAMS" in err.value.details()

    # B still streams and publishes on the slot A could not take.
    async def one_frame():
        yield api.StreamTelemetryRequest(frame_id=7, messages=[device_message("globex-1")])

    answers = [
        a
        async for a in running.stub.StreamTelemetry(
            one_frame(), metadata=bearer("gw-b"), timeout=10
        )
    ]
    assert [(a.frame_id, [r.code for r in a.results]) for a in answers] == [(7, [0])]
    response = await running.stub.PublishTelemetry(
        api.PublishTelemetryRequest(messages=[device_message("globex-2")]),
        metadata=bearer("gw-b"),
        timeout=10,
    )
    assert [r.code for r in response.results] == [0]
    for call in silent:
        call.cancel()
    await wait_for(lambda: admission.streams == 0)
    assert admission.streams_by_gateway == {}


async def test_a_gateway_holding_a_call_whose_body_never_comes_leaves_room_for_the_others(
    fair_settings, start_ingest
):
    running = await start_ingest(fair_settings)
    admission = running.server._servicer._admission
    never = asyncio.Event()

    async def no_body():
        await never.wait()
        yield b""  # never reached

    silent_call = running.channel.stream_unary(
        PUBLISH, request_serializer=lambda b: b, response_deserializer=lambda b: b
    )(no_body(), metadata=bearer("gw-a"), timeout=60)
    await wait_for(lambda: admission.rpcs_by_gateway.get("gw-a") == 1)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await running.stub.PublishTelemetry(
            api.PublishTelemetryRequest(messages=[device_message("acme-1")]),
            metadata=bearer("gw-a"),
            timeout=10,
        )
    assert_gateway_refused(err.value, "gateway_max_concurrent_rpcs", 1)
    assert "HEADWATER_INGEST_GATEWAY_MAX_CONCURRENT_RPCS" in err.value.details()
    # A's unread body holds one read reservation; B's bodies are still read and written.
    for i in range(3):
        response = await running.stub.PublishTelemetry(
            api.PublishTelemetryRequest(messages=[device_message(f"globex-{i}")]),
            metadata=bearer("gw-b"),
            timeout=10,
        )
        assert [r.code for r in response.results] == [0]
    silent_call.cancel()
    await wait_for(lambda: admission.rpcs == 0)
    assert (admission.rpcs_by_gateway, admission.reading_bytes) == ({}, 0)
