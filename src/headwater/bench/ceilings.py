"""The ceilings the ingest path is compared with: a bare gRPC echo and the raw producers."""

from __future__ import annotations

import asyncio
import time

import grpc
from aiokafka import AIOKafkaProducer
from confluent_kafka import Producer

ECHO_SERVICE = "headwater.bench.Echo"


def run_echo_server(port: int) -> None:
    """Serve a unary method that answers every request with a tiny response (child process)."""

    async def serve() -> None:
        async def echo(request: bytes, _context: grpc.aio.ServicerContext) -> bytes:
            return request[:16]

        server = grpc.aio.server()
        handler = grpc.unary_unary_rpc_method_handler(
            echo, request_deserializer=lambda b: b, response_serializer=lambda b: b
        )
        server.add_generic_rpc_handlers(
            [grpc.method_handlers_generic_handler(ECHO_SERVICE, {"Echo": handler})]
        )
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        await server.wait_for_termination()

    asyncio.run(serve())


async def raw_aiokafka(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]]) -> float:
    """Produce ``records`` (key, value) with one aiokafka producer, acks=all; return seconds."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", enable_idempotence=False, linger_ms=5
    )
    await producer.start()
    try:
        started = time.perf_counter()
        futures = [await producer.send(topic, value, key=key) for key, value in records]
        await asyncio.gather(*futures)
        return time.perf_counter() - started
    finally:
        await producer.stop()


def raw_confluent(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]]) -> float:
    """Produce ``records`` with librdkafka (confluent-kafka), acks=all; return seconds."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    failures: list[object] = []

    def delivered(err: object, _msg: object) -> None:
        if err is not None:
            failures.append(err)

    started = time.perf_counter()
    for key, value in records:
        while True:
            try:
                producer.produce(topic, value, key, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    producer.flush(60)
    elapsed = time.perf_counter() - started
    if failures:
        raise RuntimeError(f"{len(failures)} deliveries failed: {failures[0]}")
    return elapsed
