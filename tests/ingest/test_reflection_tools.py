"""Standard gRPC tools can describe and call the running service through reflection.

``headwater ingest serve`` runs in a subprocess of its own: the test process imports every
generated module, so an in-process server would find descriptors that a real deployment
never loaded (the bug this guards against: listed, then NOT_FOUND). The client is the real
``buf`` binary from the ``buf-bin`` wheel.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.protobuf import descriptor_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2

from headwater.ingest.admission.auth import hash_token
from headwater.kafka.read import read_topic
from headwater.topics import INGEST_TOPICS
from headwater_dev.devstack.ports import free_port
from tests.support.launch import launch

BUF = Path(sys.executable).parent / "buf"
SERVICE = "headwater.ingest.v1.IngestService"
TOKEN = "buf-curl-token"
START_WITHIN_S = 30.0
RPC_TIMEOUT_S = 20


@pytest.fixture(scope="module")
def ingest_target(kafka_bootstrap, ingest_topics, tmp_path_factory) -> Iterator[str]:
    """One ``headwater ingest serve`` process for this module, with a tokens file."""
    workdir = tmp_path_factory.mktemp("reflection")
    tokens = workdir / "tokens.yaml"
    tokens.write_text(
        "gateways:\n"
        "  - id: gw-buf\n"
        "    tenant: acme\n"
        f"    token_sha256: {hash_token(TOKEN)}\n"
        '    devices: ["refl-*"]\n'
    )
    port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "HEADWATER_"))},
        "HEADWATER_KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "HEADWATER_INGEST_LISTEN_ADDRESS": f"127.0.0.1:{port}",
        "HEADWATER_INGEST_METRICS_PORT": "0",
        "HEADWATER_INGEST_TOKENS_FILE": str(tokens),
        "HEADWATER_INGEST_DRAIN_GRACE_SECONDS": "1",
    }
    log = workdir / "ingest.log"
    with open(log, "wb") as out:
        proc = launch(
            [sys.executable, "-m", "headwater.cli", "ingest", "serve"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    target = f"127.0.0.1:{port}"
    try:
        _wait_serving(target, log)
        yield target
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def _wait_serving(target: str, log: Path) -> None:
    with grpc.insecure_channel(target) as channel:
        watch = health_pb2_grpc.HealthStub(channel).Watch(
            health_pb2.HealthCheckRequest(), timeout=START_WITHIN_S, wait_for_ready=True
        )
        try:
            for reply in watch:
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
        except grpc.RpcError as exc:
            tail = log.read_text(errors="replace")[-3000:]
            raise AssertionError(f"ingest never SERVING: {exc}\n{tail}") from exc
        finally:
            watch.cancel()


def buf_curl(*args: str) -> subprocess.CompletedProcess[str]:
    """Run ``buf curl`` (gRPC over h2c) and return the finished process."""
    return subprocess.run(
        [str(BUF), "curl", "--protocol", "grpc", "--http2-prior-knowledge", *args],
        capture_output=True,
        text=True,
        timeout=RPC_TIMEOUT_S,
        check=False,
    )


@pytest.mark.parametrize("protocol", ["grpc-v1", "grpc-v1alpha"])
def test_buf_lists_services_and_methods_with_either_reflection_protocol(ingest_target, protocol):
    base = f"http://{ingest_target}"
    services = buf_curl("--reflect-protocol", protocol, "--list-services", base)
    assert services.returncode == 0, services.stderr
    listed = set(services.stdout.split())
    assert {SERVICE, "grpc.health.v1.Health"} <= listed
    assert {"grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection"} <= (
        listed
    )
    # --list-methods resolves each service's file: the step that failed with NOT_FOUND.
    methods = buf_curl("--reflect-protocol", protocol, "--list-methods", base)
    assert methods.returncode == 0, methods.stderr
    assert {
        f"{SERVICE}/PublishTelemetry",
        f"{SERVICE}/StreamTelemetry",
        f"{SERVICE}/PublishAlarms",
        f"{SERVICE}/StreamAlarms",
        "grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
    } <= set(methods.stdout.split())


def test_buf_curl_publishes_a_json_body_and_gets_per_message_results(
    ingest_target, kafka_bootstrap
):
    good, bad = f"refl-{uuid.uuid4().hex[:12]}", f"refl-{uuid.uuid4().hex[:12]}"
    payload = base64.b64encode(b'{"temp_c": 21.5}').decode()
    message = {
        "deviceId": "refl-001",
        "deviceTime": "2026-01-01T00:00:00Z",
        "sequence": "1",
        "contentType": "application/vnd.acme.telemetry.v1+json",
        "payload": payload,
    }
    body = {
        "messages": [
            {**message, "messageId": good},
            # Not one of this gateway's devices: its own result, the other still written.
            {**message, "messageId": bad, "deviceId": "other-001"},
        ]
    }
    done = buf_curl(
        "--emit-defaults",  # code 0 and offset 0 are proto3 defaults, left out otherwise
        "-H",
        f"Authorization: Bearer {TOKEN}",
        "-d",
        json.dumps(body),
        f"http://{ingest_target}/{SERVICE}/PublishTelemetry",
    )
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)["results"]
    assert [r["messageId"] for r in results] == [good, bad]
    assert results[0]["code"] == 0, results[0]
    assert results[1]["code"] == grpc.StatusCode.PERMISSION_DENIED.value[0], results[1]
    # The OK answer means the record is in Kafka, at the coordinates reported.
    at = (results[0]["partition"], int(results[0]["offset"]))
    stored = {
        (m.partition(), m.offset()): m
        for m in read_topic(kafka_bootstrap, INGEST_TOPICS["telemetry"], timeout_s=30)
    }
    assert at in stored and stored[at].key() == b"refl-001"


def test_buf_curl_without_a_token_is_refused(ingest_target):
    done = buf_curl("-d", '{"messages": []}', f"http://{ingest_target}/{SERVICE}/PublishTelemetry")
    # buf curl exits with the gRPC code shifted left by three bits.
    assert done.returncode == grpc.StatusCode.UNAUTHENTICATED.value[0] << 3, done.stderr


@pytest.mark.parametrize(
    "method",
    [
        "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
        "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
    ],
)
def test_both_reflection_versions_return_the_service_file_with_its_imports(ingest_target, method):
    with grpc.insecure_channel(ingest_target) as channel:
        call = channel.stream_stream(
            method,
            request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
            response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
        )
        request = reflection_pb2.ServerReflectionRequest(file_containing_symbol=SERVICE)
        (reply,) = list(call(iter([request]), timeout=RPC_TIMEOUT_S))
    assert not reply.HasField("error_response"), reply.error_response
    files = [
        descriptor_pb2.FileDescriptorProto.FromString(raw)
        for raw in reply.file_descriptor_response.file_descriptor_proto
    ]
    by_name = {f.name: f for f in files}
    service_file = by_name["headwater/ingest/v1/ingest_service.proto"]
    assert [s.name for s in service_file.service] == ["IngestService"]
    # The transitive imports come along, so a client can build the request types.
    assert {
        "headwater/ingest/v1/ingest_messages.proto",
        "headwater/device/v1/device_message.proto",
    } <= set(by_name)
