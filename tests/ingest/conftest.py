"""Fixtures for the ingest service: a real in-process server on the session broker."""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from confluent_kafka import Consumer, TopicPartition
from google.protobuf.timestamp_pb2 import Timestamp
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from headwater.ingest.auth import hash_token
from headwater.ingest.server import IngestServer
from headwater.ingest.settings import IngestSettings
from headwater.kafka.admin import ensure_topics
from headwater.kafka.settings import KafkaSettings
from headwater.proto.device.v1 import device_message_pb2
from headwater.proto.ingest.v1 import ingest_service_pb2_grpc
from headwater.runtime.telemetry import create_telemetry
from headwater.topics import INGEST_TOPICS, TopicSpec

TOKENS = {"gw-a": "token-a", "gw-b": "token-b", "gw-revoked": "token-r"}
TOKENS_YAML = f"""
gateways:
  - id: gw-a
    tenant: acme
    token_sha256: {hash_token("token-a")}
    devices: ["acme-*"]
  - id: gw-b
    tenant: globex
    token_sha256: {hash_token("token-b")}
    devices: ["globex-*"]
  - id: gw-revoked
    tenant: acme
    token_sha256: {hash_token("token-r")}
    devices: ["acme-*"]
    revoked: true
"""


def bearer(gateway: str = "gw-a") -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {TOKENS[gateway]}")]


def device_message(
    device_id: str = "acme-001", payload: bytes = b'{"temp_c": 21.5}', **kw: object
) -> device_message_pb2.DeviceMessage:
    ts = Timestamp()
    ts.FromMilliseconds(int(time.time() * 1000))
    fields: dict[str, object] = {
        "message_id": uuid.uuid4().hex,
        "device_id": device_id,
        "device_time": ts,
        "sequence": 1,
        "content_type": "application/vnd.acme.telemetry.v1+json",
        "payload": payload,
    }
    fields.update(kw)
    return device_message_pb2.DeviceMessage(**fields)


@pytest.fixture(scope="session")
def ingest_topics(kafka_bootstrap: str) -> None:
    ensure_topics(kafka_bootstrap, [TopicSpec(t, 3, 1) for t in INGEST_TOPICS.values()])


@pytest.fixture
def tokens_file(tmp_path: Path) -> Path:
    path = tmp_path / "tokens.yaml"
    path.write_text(TOKENS_YAML)
    return path


@pytest.fixture
def ingest_settings(kafka_bootstrap: str, tokens_file: Path, ingest_topics: None) -> IngestSettings:
    return IngestSettings(
        listen_address="127.0.0.1:0",
        tokens_file=str(tokens_file),
        produce_timeout_seconds=5.0,
        drain_grace_seconds=2.0,
        kafka=KafkaSettings(bootstrap_servers=kafka_bootstrap),
    )


@dataclass
class RunningIngest:
    server: IngestServer
    channel: grpc.aio.Channel
    stub: ingest_service_pb2_grpc.IngestServiceStub

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.server.port}"


@pytest.fixture
async def start_ingest() -> AsyncIterator[Callable[..., Awaitable[RunningIngest]]]:
    """Start ingest servers with given settings; all are stopped after the test."""
    started: list[RunningIngest] = []

    async def start(
        settings: IngestSettings, wait_ready: bool = True, **kw: object
    ) -> RunningIngest:
        server = IngestServer(settings, telemetry=create_telemetry("test-ingest"), **kw)
        await server.start()
        if wait_ready:
            await server.ready(within_s=15)
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
        running = RunningIngest(server, channel, ingest_service_pb2_grpc.IngestServiceStub(channel))
        started.append(running)
        return running

    yield start
    for running in started:
        await running.channel.close()
        await running.server.stop(grace_s=1)


@pytest.fixture
async def ingest(
    ingest_settings: IngestSettings, start_ingest: Callable[..., Awaitable[RunningIngest]]
) -> RunningIngest:
    return await start_ingest(ingest_settings)


@pytest.fixture
def read_record_at() -> Iterator[Callable[[str], Callable[[str, int, int], object]]]:
    """Return a reader of the record at (topic, partition, offset) on given servers."""
    consumers: list[Consumer] = []

    def reader(bootstrap: str) -> Callable[[str, int, int], object]:
        consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": "test-reader", "enable.auto.commit": False}
        )
        consumers.append(consumer)
        return functools.partial(_read_at, consumer)

    yield reader
    for consumer in consumers:
        consumer.close()


@pytest.fixture
def read_record(
    read_record_at: Callable[[str], Callable[[str, int, int], object]], kafka_bootstrap: str
) -> Callable[[str, int, int], object]:
    """Read the record at (topic, partition, offset) from the session broker."""
    return read_record_at(kafka_bootstrap)


def _read_at(consumer: Consumer, topic: str, partition: int, offset: int) -> object:
    consumer.assign([TopicPartition(topic, partition, offset)])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            return msg
    raise AssertionError(f"no record at {topic}/{partition}@{offset}")


def details_of(exc: grpc.aio.AioRpcError) -> dict[str, object]:
    """Return the google.rpc details of a failed call by class name."""
    st = rpc_status.from_call(exc)
    assert st is not None, "status carries no google.rpc details"
    found: dict[str, object] = {}
    for any_detail in st.details:
        for cls in (
            error_details_pb2.ErrorInfo,
            error_details_pb2.RetryInfo,
            error_details_pb2.BadRequest,
            error_details_pb2.QuotaFailure,
        ):
            if any_detail.Is(cls.DESCRIPTOR):
                msg = cls()
                any_detail.Unpack(msg)
                found[cls.__name__] = msg
    return found
