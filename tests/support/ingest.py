"""The ingest service for tests: a real in-process server on the session broker.

Fixtures (``ingest_topics``, ``tokens_file``, ``ingest_settings``, ``start_ingest``) are
registered for the whole suite by ``pytest_plugins`` in tests/conftest.py: the gateway's
tests run against the same server as ingest's own. The helpers (tokens, bearer metadata,
device messages, reading google.rpc details) are imported from here.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from headwater.ingest.admission.auth import hash_token
from headwater.ingest.rpc.server import IngestServer
from headwater.ingest.settings import IngestSettings
from headwater.kafka.admin import ensure_topics
from headwater.kafka.settings import KafkaSettings
from headwater.proto.device.v1 import device_message_pb2
from headwater.proto.ingest.v1 import ingest_messages_pb2 as api
from headwater.proto.ingest.v1 import ingest_service_pb2_grpc
from headwater.runtime.telemetry import create_telemetry
from headwater.topics import INGEST_TOPICS, TopicSpec

#: The status of a refusal for overload.
EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED

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


async def publish(stub, device_id="acme-001", metadata=None, deadline_s=10):
    return await stub.PublishTelemetry(
        api.PublishTelemetryRequest(messages=[device_message(device_id)]),
        metadata=metadata,
        timeout=deadline_s,
    )


def assert_refused(exc: grpc.aio.AioRpcError, limit: str, subject: str, setting: str) -> None:
    """RESOURCE_EXHAUSTED, reason OVERLOADED, a RetryInfo, a QuotaFailure naming the limit."""
    assert exc.code() == EXHAUSTED, exc
    details = details_of(exc)
    info = details["ErrorInfo"]
    assert info.reason == "OVERLOADED"  # gateways pause on it (any other reason shrinks frames)
    assert info.metadata["limit"] == limit
    assert details["RetryInfo"].retry_delay.ToNanoseconds() > 0
    (violation,) = details["QuotaFailure"].violations
    assert (violation.quota_id, violation.subject, violation.quota_metric) == (
        limit,
        subject,
        setting,
    )
    assert setting in violation.description
