"""The authentication matrix: tokens, revocation, reload, tenants, mTLS."""

from __future__ import annotations

import asyncio
import dataclasses

import grpc
import pytest

from headwater.ingest.admission.auth import TokensFileError, hash_token, parse_tokens
from headwater.proto.ingest.v1 import ingest_messages_pb2 as api
from headwater.proto.ingest.v1 import ingest_service_pb2_grpc
from tests.support.ingest import publish
from tests.support.tls_certs import issue, make_ca, write_pem

from .conftest import TOKENS_YAML, bearer, details_of, device_message

UNAUTHENTICATED = grpc.StatusCode.UNAUTHENTICATED


@pytest.mark.parametrize(
    ("metadata", "reason"),
    [
        (None, "MISSING_CREDENTIALS"),
        ([("authorization", "Bearer wrong-token")], "INVALID_TOKEN"),
        ([("authorization", "Basic dXNlcjpwdw==")], "INVALID_TOKEN"),
        (bearer("gw-revoked"), "REVOKED_CREDENTIALS"),
    ],
)
async def test_bad_credentials_are_unauthenticated(ingest, metadata, reason):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await publish(ingest.stub, metadata=metadata)
    assert err.value.code() == UNAUTHENTICATED
    assert details_of(err.value)["ErrorInfo"].reason == reason


async def test_stream_with_bad_credentials_is_unauthenticated(ingest):
    async def frames():
        yield api.StreamTelemetryRequest(frame_id=1, messages=[device_message()])

    with pytest.raises(grpc.aio.AioRpcError) as err:
        async for _ in ingest.stub.StreamTelemetry(
            frames(), metadata=bearer("gw-revoked"), timeout=10
        ):
            pass
    assert err.value.code() == UNAUTHENTICATED


async def test_gateway_of_tenant_a_cannot_send_a_device_of_tenant_b(ingest):
    ok = await publish(ingest.stub, "globex-7", metadata=bearer("gw-b"))
    denied = await publish(ingest.stub, "globex-7", metadata=bearer("gw-a"))
    assert ok.results[0].code == 0
    assert denied.results[0].code == grpc.StatusCode.PERMISSION_DENIED.value[0]
    assert "tenant 'acme'" in denied.results[0].error.message


async def test_tokens_file_is_reloaded_when_it_changes(ingest, tokens_file):
    assert (await publish(ingest.stub, metadata=bearer("gw-a"))).results[0].code == 0
    revoked = TOKENS_YAML.replace(
        'devices: ["acme-*"]\n  - id: gw-b',
        'devices: ["acme-*"]\n    revoked: true\n  - id: gw-b',
        1,
    )
    assert revoked != TOKENS_YAML
    tmp = tokens_file.with_suffix(".new")
    tmp.write_text(revoked)
    tmp.replace(tokens_file)  # atomic swap, as a Kubernetes Secret update does
    deadline = asyncio.get_running_loop().time() + 10
    while True:
        try:
            await publish(ingest.stub, metadata=bearer("gw-a"))
        except grpc.aio.AioRpcError as exc:
            assert exc.code() == UNAUTHENTICATED
            break
        assert asyncio.get_running_loop().time() < deadline, "tokens file never reloaded"
        await asyncio.sleep(0.2)


async def test_a_broken_tokens_file_keeps_the_previous_table(ingest, tokens_file):
    tokens_file.write_text("gateways: [ {id: }")  # malformed YAML
    await asyncio.sleep(1.2)
    assert (await publish(ingest.stub, metadata=bearer("gw-b"), device_id="globex-1")).results[
        0
    ].code == 0


async def test_unauthenticated_mode_needs_the_explicit_flag(ingest_settings, start_ingest):
    running = await start_ingest(
        dataclasses.replace(ingest_settings, tokens_file="", allow_unauthenticated=True)
    )
    assert (await publish(running.stub, device_id="anything-1")).results[0].code == 0


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("gateways: [{tenant: acme}]", "'id' and 'tenant' are required"),
        ("gateways: [{id: a, tenant: t, token_sha256: nothex}]", "64 hex digits"),
        ("gateways: [{id: a, tenant: t}, {id: a, tenant: t}]", "duplicate id"),
        ("gateways: [{id: a, tenant: t, devices: acme}]", "list of patterns"),
        ("[1, 2]", "'gateways' list"),
    ],
)
def test_malformed_tokens_files_are_refused(text, problem):
    with pytest.raises(TokensFileError, match=problem):
        parse_tokens(text)


def test_tokens_file_stores_only_hashes():
    gateways = parse_tokens(TOKENS_YAML)
    assert gateways["gw-a"].token_sha256 == hash_token("token-a")
    assert "token-a" not in TOKENS_YAML


@pytest.fixture
def pki(tmp_path):
    ca_pem, ca_key, ca_cert = make_ca()
    (tmp_path / "ca.crt").write_bytes(ca_pem.cert)
    server = write_pem(tmp_path, "server", issue(ca_key, ca_cert, "localhost", server=True))
    clients = {
        cn: issue(ca_key, ca_cert, cn, server=False) for cn in ("gw-a", "gw-unknown", "gw-revoked")
    }
    return tmp_path / "ca.crt", server, clients, ca_pem


@pytest.fixture
async def mtls_ingest(ingest_settings, start_ingest, pki):
    ca_file, (cert, key), _clients, _ = pki
    settings = dataclasses.replace(
        ingest_settings,
        tls_cert_file=str(cert),
        tls_key_file=str(key),
        tls_client_ca_file=str(ca_file),
    )
    running = await start_ingest(settings)
    channels = []

    def connect(client: str | None):
        _, _, clients, ca_pem = pki
        pem = clients.get(client) if client else None
        creds = grpc.ssl_channel_credentials(
            root_certificates=ca_pem.cert,
            private_key=pem.key if pem else None,
            certificate_chain=pem.cert if pem else None,
        )
        channel = grpc.aio.secure_channel(
            f"127.0.0.1:{running.server.port}",
            creds,
            options=[("grpc.ssl_target_name_override", "localhost")],
        )
        channels.append(channel)
        return ingest_service_pb2_grpc.IngestServiceStub(channel)

    yield connect
    for channel in channels:
        await channel.close()


async def test_mtls_certificate_identity_is_the_gateway_id(mtls_ingest):
    stub = mtls_ingest("gw-a")
    ok = await publish(stub)  # no token: the certificate says who we are
    assert ok.results[0].code == 0
    denied = await publish(stub, "globex-1")
    assert denied.results[0].code == grpc.StatusCode.PERMISSION_DENIED.value[0]


async def test_mtls_without_a_client_certificate_is_refused(mtls_ingest):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await publish(mtls_ingest(None), metadata=bearer(), deadline_s=5)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE  # the TLS handshake fails


@pytest.mark.parametrize(
    ("client", "reason"), [("gw-unknown", "UNKNOWN_GATEWAY"), ("gw-revoked", "REVOKED_CREDENTIALS")]
)
async def test_mtls_certificate_of_an_unknown_or_revoked_gateway(mtls_ingest, client, reason):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await publish(mtls_ingest(client))
    assert err.value.code() == UNAUTHENTICATED
    assert details_of(err.value)["ErrorInfo"].reason == reason


async def test_mtls_certificate_and_token_of_different_gateways(mtls_ingest):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await publish(mtls_ingest("gw-a"), metadata=bearer("gw-b"))
    assert details_of(err.value)["ErrorInfo"].reason == "CREDENTIAL_MISMATCH"
