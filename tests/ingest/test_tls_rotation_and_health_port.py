"""Issue 14: TLS files rotate without a restart; probes reach health in plaintext with TLS on.

A real in-process ingest server with mTLS on the session broker. Certificates are made
here (``tls_certs``); files are replaced atomically, as the kubelet updates a Secret.
"""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import ssl
import uuid
from pathlib import Path

import grpc
import pytest
from confluent_kafka import KafkaError
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from grpc_health.v1 import health_pb2, health_pb2_grpc

from headwater.endpoints import SERVICE_NAME
from headwater.ingest.rpc.tls import RotatingCertificates, TlsFilesError
from headwater.ingest.settings import DEFAULT_HEALTH_PORT, IngestSettings
from headwater.proto.ingest.v1 import ingest_messages_pb2 as api
from headwater.proto.ingest.v1 import ingest_service_pb2_grpc
from headwater_dev.devstack.ports import free_port
from tests.support.ingest import device_message, publish
from tests.support.tls_certs import Pem, issue, make_ca

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


@dataclasses.dataclass
class Pki:
    """One CA with a server certificate (localhost) and a gateway client certificate."""

    ca: Pem
    server: Pem
    client: Pem

    @classmethod
    def make(cls, name: str) -> Pki:
        ca, key, cert = make_ca(f"headwater-test-ca-{name}")
        return cls(ca, issue(key, cert, "localhost", server=True), issue(key, cert, "gw-a", False))


def replace(path: Path, data: bytes) -> None:
    """Replace a file atomically (new inode), as a Secret volume update does."""
    tmp = path.with_name(f".{path.name}.new")
    tmp.write_bytes(data)
    tmp.replace(path)


def install(directory: Path, pki: Pki) -> None:
    replace(directory / "tls.crt", pki.server.cert)
    replace(directory / "tls.key", pki.server.key)
    replace(directory / "ca.crt", pki.ca.cert)


def der(pem: bytes) -> bytes:
    return x509.load_pem_x509_certificate(pem).public_bytes(serialization.Encoding.DER)


def presented_certificate(port: int, trust: Pki, client: Pki, tmp_path: Path) -> bytes:
    """Handshake on a new connection; return the server certificate it presents (DER)."""
    context = ssl.create_default_context(cadata=trust.ca.cert.decode())
    context.set_alpn_protocols(["h2"])
    cert, key = tmp_path / f"c-{uuid.uuid4().hex}.crt", tmp_path / f"c-{uuid.uuid4().hex}.key"
    cert.write_bytes(client.client.cert)
    key.write_bytes(client.client.key)
    context.load_cert_chain(cert, key)
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        peer = tls.getpeercert(binary_form=True)
    assert peer is not None
    return peer


def channel_to(port: int, trust: Pki, client: Pki) -> grpc.aio.Channel:
    creds = grpc.ssl_channel_credentials(
        root_certificates=trust.ca.cert,
        private_key=client.client.key,
        certificate_chain=client.client.cert,
    )
    return grpc.aio.secure_channel(
        f"127.0.0.1:{port}",
        creds,
        # A pool of its own: the channel must open a new connection, not share one.
        options=[
            ("grpc.ssl_target_name_override", "localhost"),
            ("grpc.use_local_subchannel_pool", 1),
        ],
    )


@pytest.fixture
def tls_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "tls"
    directory.mkdir()
    return directory


def tls_settings(base: IngestSettings, directory: Path, **kw: object) -> IngestSettings:
    return dataclasses.replace(
        base,
        tls_cert_file=str(directory / "tls.crt"),
        tls_key_file=str(directory / "tls.key"),
        tls_client_ca_file=str(directory / "ca.crt"),
        **kw,  # type: ignore[arg-type]
    )


async def test_rotated_certificates_reach_new_connections_and_open_streams_go_on(
    ingest_settings, start_ingest, tls_dir, tmp_path
):
    a, b = Pki.make("a"), Pki.make("b")
    install(tls_dir, a)
    running = await start_ingest(tls_settings(ingest_settings, tls_dir, health_port=0))
    port = running.server.port
    assert presented_certificate(port, a, a, tmp_path) == der(a.server.cert)

    old = channel_to(port, a, a)
    stream = ingest_service_pb2_grpc.IngestServiceStub(old).StreamTelemetry(timeout=30)
    await stream.write(api.StreamTelemetryRequest(frame_id=1, messages=[device_message()]))
    assert (await asyncio.wait_for(stream.read(), 10)).results[0].code == 0

    install(tls_dir, b)  # cert-manager renewed: new server certificate and new client CA
    assert presented_certificate(port, b, b, tmp_path) == der(b.server.cert)
    new = channel_to(port, b, b)
    assert (await publish(ingest_service_pb2_grpc.IngestServiceStub(new))).results[0].code == 0
    # The client CA moved too: a gateway certificate of the old CA is refused now.
    stale = channel_to(port, b, a)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await publish(ingest_service_pb2_grpc.IngestServiceStub(stale), deadline_s=5)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE

    # The stream opened before the rotation still works, on its old session.
    await stream.write(api.StreamTelemetryRequest(frame_id=2, messages=[device_message()]))
    answer = await asyncio.wait_for(stream.read(), 10)
    assert (answer.frame_id, answer.results[0].code) == (2, 0)
    await stream.done_writing()
    for channel in (old, new, stale):
        await channel.close()


async def test_a_half_written_rotation_keeps_the_working_certificate(
    ingest_settings, start_ingest, tls_dir, tmp_path
):
    a, b = Pki.make("a"), Pki.make("b")
    install(tls_dir, a)
    running = await start_ingest(tls_settings(ingest_settings, tls_dir, health_port=0))
    port = running.server.port
    replace(tls_dir / "tls.crt", b.server.cert)  # the key is not there yet: a mismatched pair
    assert presented_certificate(port, a, a, tmp_path) == der(a.server.cert)
    replace(tls_dir / "tls.key", b.server.key)
    replace(tls_dir / "ca.crt", b.ca.cert)
    assert presented_certificate(port, b, b, tmp_path) == der(b.server.cert)


def test_unusable_tls_files_are_refused_at_start_naming_the_setting(tls_dir):
    a, b = Pki.make("a"), Pki.make("b")
    install(tls_dir, a)
    replace(tls_dir / "tls.key", b.server.key)
    with pytest.raises(TlsFilesError, match="HEADWATER_INGEST_TLS_KEY_FILE"):
        RotatingCertificates(str(tls_dir / "tls.crt"), str(tls_dir / "tls.key"))


async def test_plaintext_health_port_reflects_not_serving_with_tls_on(
    ingest_settings, start_ingest, tls_dir
):
    a = Pki.make("a")
    install(tls_dir, a)
    health_port = free_port()
    running = await start_ingest(tls_settings(ingest_settings, tls_dir, health_port=health_port))
    assert running.server.health_port == health_port
    async with grpc.aio.insecure_channel(f"127.0.0.1:{health_port}") as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", SERVICE_NAME):
            check = await health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
            assert check.status == SERVING
        # Only health there: the ingest API is not reachable without TLS.
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await publish(ingest_service_pb2_grpc.IngestServiceStub(channel), deadline_s=5)
        assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED

        # A fatal producer error turns health NOT_SERVING while a new producer connects.
        watch = health.Watch(health_pb2.HealthCheckRequest(service=SERVICE_NAME), timeout=30)
        assert (await asyncio.wait_for(watch.read(), 15)).status == SERVING
        writer = running.server.writer
        fatal = KafkaError(KafkaError._FATAL, "injected: fatal producer error", fatal=True)
        await asyncio.to_thread(writer.error_callback, fatal)
        assert (await asyncio.wait_for(watch.read(), 15)).status == NOT_SERVING
        assert (await asyncio.wait_for(watch.read(), 15)).status == SERVING
        watch.cancel()

        # Draining shows on the health port too, while open calls finish (a stream keeps
        # the drain going for its grace period).
        gateway = channel_to(running.server.port, a, a)
        stream = ingest_service_pb2_grpc.IngestServiceStub(gateway).StreamTelemetry(timeout=30)
        await stream.write(api.StreamTelemetryRequest(frame_id=1, messages=[device_message()]))
        assert (await asyncio.wait_for(stream.read(), 10)).results[0].code == 0
        # A watch, not polling: once the drain ends the port closes, and a slow poll could
        # miss the NOT_SERVING in between (it did, on a loaded machine).
        watch = health.Watch(health_pb2.HealthCheckRequest(service=""), timeout=30)
        assert (await asyncio.wait_for(watch.read(), 15)).status == SERVING
        stopping = asyncio.create_task(running.server.stop(grace_s=2))
        assert (await asyncio.wait_for(watch.read(), 15)).status == NOT_SERVING
        await stopping
        await gateway.close()


def test_health_port_defaults_on_with_tls_only():
    base = {"HEADWATER_INGEST_ALLOW_UNAUTHENTICATED": "true"}
    assert IngestSettings.from_env(base).effective_health_port == 0
    tls = base | {"HEADWATER_INGEST_TLS_CERT_FILE": "c", "HEADWATER_INGEST_TLS_KEY_FILE": "k"}
    assert IngestSettings.from_env(tls).effective_health_port == DEFAULT_HEALTH_PORT
    assert IngestSettings.from_env(tls | {"HEADWATER_INGEST_HEALTH_PORT": "0"}).health_port == 0
    chosen = base | {"HEADWATER_INGEST_HEALTH_PORT": "9000"}
    assert IngestSettings.from_env(chosen).effective_health_port == 9000
