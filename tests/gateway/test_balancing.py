"""Client-side balancing: calls spread over every ingest replica, and one replica leaving
(it drains on SIGTERM) moves its streams to the others without losing a message.

The address list comes from an ``ipv4:`` target here (two replicas on loopback need two
ports); a ``dns:///`` name that resolves to every replica feeds the same list to the same
``round_robin`` policy.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from headwater.gateway.client import GatewayClient
from headwater.gateway.spool import Spool
from headwater.ingest.rpc.server import IngestServer
from headwater.ingest.settings import IngestSettings
from headwater.runtime.telemetry import create_telemetry

from .conftest import CT, config, in_kafka, metric_points


@pytest.fixture
async def replicas(
    ingest_settings: IngestSettings,
) -> AsyncIterator[list[tuple[IngestServer, InMemoryMetricReader]]]:
    started: list[tuple[IngestServer, InMemoryMetricReader]] = []
    try:
        for _ in range(2):
            reader = InMemoryMetricReader()
            telemetry = create_telemetry("test-ingest", extra_readers=(reader,))
            server = IngestServer(ingest_settings, telemetry=telemetry)
            await server.start()
            started.append((server, reader))
        for server, _ in started:
            await server.ready(within_s=15)
        yield started
    finally:
        for server, _ in started:
            await server.stop(grace_s=1)


def _calls(reader: InMemoryMetricReader, method: str) -> int:
    """Calls a replica answered."""
    return sum(
        value
        for (name, attrs), value in metric_points(reader).items()
        if name == "headwater.ingest.requests" and ("method", method) in attrs
    )


def _frames(reader: InMemoryMetricReader) -> int:
    """Stream frames a replica answered."""
    return sum(
        value
        for (name, _attrs), value in metric_points(reader).items()
        if name == "headwater.ingest.frame.duration"
    )


async def test_calls_spread_over_replicas_and_one_leaving_loses_nothing(
    replicas: list[tuple[IngestServer, InMemoryMetricReader]],
    kafka_bootstrap: str,
    tmp_path: Path,
) -> None:
    target = "ipv4:" + ",".join(f"127.0.0.1:{server.port}" for server, _ in replicas)
    with Spool(tmp_path / "spool.db") as spool:
        ids = {spool.enqueue("telemetry", "acme-1", CT, b"{}").message_id for _ in range(200)}
        batch = config(target, use_stream=False, frame_messages=10)
        async with GatewayClient(spool, batch) as client:
            assert await client.drain(within_s=30)
        calls = [_calls(reader, "publish") for _, reader in replicas]
        assert sum(calls) >= 20 and min(calls) >= 5, f"calls per replica: {calls}"

        # Streams now; one replica drains and stops mid-run.
        async with GatewayClient(spool, config(target, frame_messages=10)) as client:
            stop = asyncio.Event()
            sender = asyncio.create_task(client.run(stop))
            for _ in range(100):
                ids.add((await client.enqueue("telemetry", "acme-2", CT, b"{}")).message_id)
            assert await client.drain(within_s=30)
            # Stop the replica that holds the telemetry stream (it answered its frames).
            frames = [_frames(reader) for _, reader in replicas]
            assert max(frames) > 0, frames
            holder = replicas[frames.index(max(frames))][0]
            await holder.stop(grace_s=1)
            for _ in range(100):
                ids.add((await client.enqueue("telemetry", "acme-3", CT, b"{}")).message_id)
            assert await client.drain(within_s=30)
            stop.set()
            await sender
    assert in_kafka(kafka_bootstrap, "telemetry", ids) == ids
