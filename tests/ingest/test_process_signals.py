"""The ingest process under load: SIGKILL loses nothing acknowledged; SIGTERM drains."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from headwater.devstack.broker import free_port
from headwater.devstack.readback import read_ingest
from headwater.proto.ingest.v1 import ingest_messages_pb2 as api
from headwater.proto.ingest.v1 import ingest_service_pb2_grpc

from .conftest import device_message

GRACE_S = 3.0


@pytest.fixture
def ingest_process(kafka_bootstrap, ingest_topics, tmp_path):
    port = free_port()
    env = {
        **os.environ,
        "HEADWATER_KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "HEADWATER_KAFKA_ENABLE_IDEMPOTENCE": "false",
        "HEADWATER_INGEST_LISTEN_ADDRESS": f"127.0.0.1:{port}",
        "HEADWATER_INGEST_METRICS_PORT": "0",
        "HEADWATER_INGEST_ALLOW_UNAUTHENTICATED": "true",
        "HEADWATER_INGEST_DRAIN_GRACE_SECONDS": str(GRACE_S),
    }
    log_path = tmp_path / "ingest.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "headwater.cli", "ingest", "serve"],
            env=env,
            stdout=log,
            stderr=log,
        )
    target = f"127.0.0.1:{port}"
    with grpc.insecure_channel(target) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        deadline = time.monotonic() + 30
        while True:
            try:
                reply = health.Check(health_pb2.HealthCheckRequest(), timeout=1)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    break
            except grpc.RpcError:
                pass
            assert time.monotonic() < deadline, log_path.read_text()[-2000:]
            time.sleep(0.2)
    yield proc, target
    if proc.poll() is None:
        proc.kill()
        proc.wait(10)


async def load(target: str, stop: asyncio.Event, acked: list, outcomes: list, callers: int = 8):
    """Send batches from several callers until ``stop`` or the server goes away."""
    prefix = f"sig-{uuid.uuid4().hex[:8]}"

    async def caller(n: int) -> None:
        async with grpc.aio.insecure_channel(target) as channel:
            stub = ingest_service_pb2_grpc.IngestServiceStub(channel)
            while not stop.is_set():
                messages = [device_message(f"{prefix}-{n}-{i}") for i in range(10)]
                try:
                    response = await stub.PublishTelemetry(
                        api.PublishTelemetryRequest(messages=messages), timeout=5
                    )
                except grpc.aio.AioRpcError as exc:
                    outcomes.append(exc.code())
                    if exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED):
                        return  # the server is gone or draining
                    continue
                outcomes.append(grpc.StatusCode.OK)
                acked.extend(
                    (m, r) for m, r in zip(messages, response.results, strict=True) if r.code == 0
                )

    await asyncio.wait_for(asyncio.gather(*(caller(n) for n in range(callers))), timeout=60)


def assert_all_in_kafka(bootstrap: str, acked: list) -> None:
    """Every acknowledged message is in the ingest topic at the offset it was told."""
    found = read_ingest(bootstrap, ["ingest.telemetry.v1"]).found
    for msg, result in acked:
        assert found.get(msg.message_id) == ("ingest.telemetry.v1", result.partition, result.offset)


async def test_sigkill_under_load_loses_nothing_acknowledged(ingest_process, kafka_bootstrap):
    proc, target = ingest_process
    stop, acked, outcomes = asyncio.Event(), [], []
    traffic = asyncio.create_task(load(target, stop, acked, outcomes))
    await asyncio.sleep(2.0)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    await traffic
    assert len(acked) > 50, "too little traffic to mean anything"
    assert_all_in_kafka(kafka_bootstrap, acked)


async def test_sigterm_under_load_drains_and_exits_within_grace(ingest_process, kafka_bootstrap):
    proc, target = ingest_process
    stop, acked, outcomes = asyncio.Event(), [], []
    traffic = asyncio.create_task(load(target, stop, acked, outcomes))
    await asyncio.sleep(1.5)
    signalled = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    code = await asyncio.get_running_loop().run_in_executor(None, proc.wait, GRACE_S + 10)
    exited_after = time.monotonic() - signalled
    stop.set()
    await traffic  # every caller finished: no call hung
    assert code == 0
    assert exited_after < GRACE_S + 5, f"exit took {exited_after:.1f}s"
    # Clean endings only: answered, refused as draining, or cut by the server's shutdown
    # before a handler took the call (gRPC answers those CANCELLED; gateways resend them).
    clean = {grpc.StatusCode.OK, grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED}
    assert set(outcomes) <= clean, set(outcomes)
    assert outcomes.count(grpc.StatusCode.OK) > 10
    assert_all_in_kafka(kafka_bootstrap, acked)
