"""Overload limits in front of the handlers: calls waiting inside gRPC, bodies not read.

The server runs in this process, so blocking the event loop (``time.sleep`` in a loop
callback) is a deterministic stand-in for a loop too busy to start new calls: gRPC's core
keeps accepting streams meanwhile. The calls come from a synchronous channel on other
threads, which needs no event loop to send. Nothing here depends on the machine's speed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest

from headwater import record_headers as rh
from headwater.ingest.settings import IngestSettings
from headwater.kafka.read import read_topic
from headwater.proto.ingest.v1 import ingest_messages_pb2 as api
from headwater.proto.ingest.v1 import ingest_service_pb2_grpc
from headwater.topics import INGEST_TOPICS
from tests.support.ingest import RunningIngest, assert_refused, bearer, device_message

PUBLISH = "/headwater.ingest.v1.IngestService/PublishTelemetry"
TOPIC = INGEST_TOPICS["telemetry"]


def _publish_blocking(target: str, request: api.PublishTelemetryRequest) -> object:
    """One call on its own synchronous channel; returns the response or the status code."""
    with grpc.insecure_channel(target) as channel:
        stub = ingest_service_pb2_grpc.IngestServiceStub(channel)
        try:
            return stub.PublishTelemetry(request, metadata=bearer(), timeout=30)
        except grpc.RpcError as exc:
            return exc.code()


async def test_calls_beyond_the_pending_bound_are_refused_by_grpc_without_queueing(
    ingest_settings: IngestSettings, start_ingest: Callable[..., Awaitable[RunningIngest]]
):
    """A loop that cannot start calls does not let them pile up (with bodies) inside gRPC."""
    running = await start_ingest(dataclasses.replace(ingest_settings, max_pending_calls=2))
    calls = 24
    requests = [api.PublishTelemetryRequest(messages=[device_message()]) for _ in range(calls)]
    loop = asyncio.get_running_loop()
    with ThreadPoolExecutor(max_workers=calls) as pool:
        # The loop is blocked while every call is sent; the block ends on its own.
        loop.call_soon(time.sleep, 3.0)
        futures = [
            loop.run_in_executor(pool, _publish_blocking, running.target, r) for r in requests
        ]
        results = await asyncio.wait_for(asyncio.gather(*futures), 60)
    acked = {
        r.message_id: (r.partition, r.offset)
        for response in results
        if isinstance(response, api.PublishTelemetryResponse)
        for r in response.results
        if r.code == 0
    }
    refused = [r for r in results if not isinstance(r, api.PublishTelemetryResponse)]
    # At most the pending bound (and the hard limit, twice it) waited; the rest were
    # refused by gRPC's core at once. It answers without a grpc-status (measured with
    # grpcio 1.85: CANCELLED at the client), so gateways retry after their backoff.
    assert refused, "no call was refused: the pending bound did not apply"
    assert set(refused) <= {grpc.StatusCode.CANCELLED, grpc.StatusCode.RESOURCE_EXHAUSTED}
    assert len(acked) >= 1, "no call was served after the loop came back"
    assert len(acked) <= 1 + 2 * 2 + 1, "more calls waited than the hard limit allows"
    stored = {
        dict(m.headers() or [])[rh.MESSAGE_ID].decode(): (m.partition(), m.offset())
        for m in read_topic(ingest_settings.kafka.bootstrap_servers, TOPIC, timeout_s=60)
    }
    for message_id, where in acked.items():
        assert stored.get(message_id) == where, (message_id, where)


async def test_a_full_process_refuses_before_reading_the_body(
    ingest_settings: IngestSettings, start_ingest: Callable[..., Awaitable[RunningIngest]]
):
    """With the bound taken, a call is refused from its size estimate, its body unread."""
    running = await start_ingest(
        dataclasses.replace(
            ingest_settings,
            gateway_rate_bytes_per_second=0,
            gateway_max_inflight_bytes=0,
        )
    )
    admission = running.server._servicer._admission  # the real server's own books
    ok = await running.stub.PublishTelemetry(
        api.PublishTelemetryRequest(messages=[device_message() for _ in range(5)]),
        metadata=bearer(),
        timeout=10,
    )
    assert all(r.code == 0 for r in ok.results)
    assert admission.typical_request > 0
    # Take the whole bound as if other calls held it (their bytes not yet acked).
    admission.in_use = admission.max_bytes
    call = running.channel.unary_unary(
        PUBLISH, request_serializer=lambda b: b, response_deserializer=lambda b: b
    )
    try:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            # Not a request at all: had it been read, it would be INVALID_ARGUMENT.
            await call(b"\xff" * 50_000, metadata=bearer(), timeout=10)
    finally:
        admission.in_use = 0
    assert_refused(
        err.value, "max_inflight_bytes", "ingest-process", "HEADWATER_INGEST_MAX_INFLIGHT_BYTES"
    )
    assert admission.reading_bytes == 0, "a refused call was counted as reading"
    # The same garbage once there is room: read, and refused for what it is.
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call(b"\xff" * 50_000, metadata=bearer(), timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value
