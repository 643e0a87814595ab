"""grpc.health.v1 follows the producer and the drain; reflection lists the service."""

from __future__ import annotations

import dataclasses

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from headwater_dev.devstack.ports import free_port

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


async def check(channel, service=""):
    stub = health_pb2_grpc.HealthStub(channel)
    return (await stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)).status


async def test_serving_once_the_producer_is_connected(ingest):
    assert await check(ingest.channel) == SERVING
    assert await check(ingest.channel, "headwater.ingest.v1.IngestService") == SERVING


async def test_not_serving_until_kafka_is_reached(ingest_settings, start_ingest):
    dead = dataclasses.replace(
        ingest_settings,
        kafka=dataclasses.replace(
            ingest_settings.kafka, bootstrap_servers=f"127.0.0.1:{free_port()}"
        ),
    )
    running = await start_ingest(dead, wait_ready=False)
    assert await check(running.channel) == NOT_SERVING


async def test_not_serving_while_draining(ingest):
    watcher = grpc.aio.insecure_channel(ingest.target)
    stream = health_pb2_grpc.HealthStub(watcher).Watch(health_pb2.HealthCheckRequest(), timeout=10)
    assert (await stream.read()).status == SERVING
    await ingest.server.stop(grace_s=0.5)
    assert (await stream.read()).status == NOT_SERVING
    await watcher.close()


async def test_reflection_lists_the_ingest_service(ingest):
    stub = reflection_pb2_grpc.ServerReflectionStub(ingest.channel)

    async def requests():
        yield reflection_pb2.ServerReflectionRequest(list_services="")

    async for response in stub.ServerReflectionInfo(requests(), timeout=5):
        names = {s.name for s in response.list_services_response.service}
        assert {"headwater.ingest.v1.IngestService", "grpc.health.v1.Health"} <= names
        break
