"""The gateway client against the real ingest service: delivery, rejections, pushback, outages."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from headwater.devstack.readback import read_topic
from headwater.gateway.client import GatewayClient, GatewayConfig, Outcome, TlsConfig
from headwater.gateway.spool import Spool
from headwater.proto.device.v1 import device_message_pb2
from headwater.topics import INGEST_TOPICS

from ..faultproxy import FaultProxy
from ..ingest.tls_certs import issue, make_ca, write_pem
from .conftest import TOKENS

CT = "application/vnd.acme.telemetry.v1+json"


def in_kafka(bootstrap: str, endpoint: str, ids: set[str]) -> set[str]:
    """Return which of ``ids`` are in the endpoint's ingest topic."""
    found = set()
    for record in read_topic(bootstrap, INGEST_TOPICS[endpoint]):
        msg = device_message_pb2.DeviceMessage.FromString(record.value())
        if msg.message_id in ids:
            found.add(msg.message_id)
    return found


def config(target: str, **kw: object) -> GatewayConfig:
    base = GatewayConfig(
        target=target,
        token=TOKENS["gw-a"],
        call_timeout_s=3.0,
        backoff_initial_s=0.05,
        backoff_max_s=0.5,
    )
    return dataclasses.replace(base, **kw)


@pytest.mark.parametrize("use_stream", [True, False], ids=["stream", "batch"])
async def test_every_spooled_message_is_delivered_once_and_leaves_the_spool(
    start_ingest, ingest_settings, kafka_bootstrap, tmp_path: Path, use_stream: bool
) -> None:
    running = await start_ingest(ingest_settings)
    outcomes: list[Outcome] = []
    with Spool(tmp_path / "spool.db") as spool:
        ids = {
            spool.enqueue("telemetry", f"acme-{i % 7}", CT, b'{"temp_c": 1}').message_id
            for i in range(450)
        }
        ids |= {
            spool.enqueue(
                "alarms", "acme-1", "application/vnd.acme.alarm.v1+json", b"{}"
            ).message_id
            for _ in range(30)
        }
        client = GatewayClient(
            spool, config(running.target, use_stream=use_stream, frame_messages=50), outcomes.append
        )
        async with client:
            assert await client.drain(within_s=30)
        assert spool.stats().depth == 0
        assert spool.stats().counters["delivered"] == len(ids)
    delivered = [o for o in outcomes if o.status == "delivered"]
    assert {o.message_id for o in delivered} == ids and len(delivered) == len(ids)
    assert (
        in_kafka(kafka_bootstrap, "telemetry", ids) | in_kafka(kafka_bootstrap, "alarms", ids)
        == ids
    )


async def test_poison_messages_are_rejected_for_good_and_never_block_the_rest(
    start_ingest, ingest_settings, tmp_path: Path
) -> None:
    running = await start_ingest(ingest_settings)
    with Spool(tmp_path / "spool.db") as spool:
        good_before = [
            spool.enqueue("telemetry", "acme-1", CT, b"{}").message_id for _ in range(10)
        ]
        bad = device_message_pb2.DeviceMessage(
            message_id="not a valid id!", device_id="acme-1", content_type=CT, payload=b"{}"
        )
        bad.device_time.GetCurrentTime()
        spool.enqueue_message("telemetry", bad)
        foreign = spool.enqueue(
            "telemetry", "globex-1", CT, b"{}"
        ).message_id  # outside gw-a's binding
        good_after = [spool.enqueue("telemetry", "acme-1", CT, b"{}").message_id for _ in range(10)]
        async with GatewayClient(spool, config(running.target, frame_messages=8)) as client:
            assert await client.drain(within_s=20)
        rejected = {r.message_id: (r.code, r.reason) for r in spool.rejected()}
        assert rejected == {
            "not a valid id!": ("INVALID_ARGUMENT", "INVALID_MESSAGE"),
            foreign: ("PERMISSION_DENIED", "DEVICE_NOT_PERMITTED"),
        }
        assert spool.stats().counters["delivered"] == len(good_before) + len(good_after)


async def test_resource_exhausted_pushback_is_honoured_and_nothing_is_lost(
    start_ingest, ingest_settings, kafka_bootstrap, tmp_path: Path
) -> None:
    # A budget of ~2 small frames: concurrent frames get RESOURCE_EXHAUSTED with RetryInfo.
    tight = dataclasses.replace(
        ingest_settings, max_inflight_bytes=4096, overload_retry_delay_ms=50
    )
    running = await start_ingest(tight)
    outcomes: list[Outcome] = []
    with Spool(tmp_path / "spool.db") as spool:
        ids = {spool.enqueue("telemetry", "acme-1", CT, b"x" * 300).message_id for _ in range(200)}
        client = GatewayClient(
            spool, config(running.target, frame_messages=10, window_frames=4), outcomes.append
        )
        async with client:
            assert await client.drain(within_s=60)
    pushed_back = [o for o in outcomes if o.status == "retry" and o.code == "RESOURCE_EXHAUSTED"]
    assert pushed_back, "the tight budget never pushed back"
    assert {o.reason for o in pushed_back} == {"OVERLOADED"}
    assert {o.message_id for o in outcomes if o.status == "delivered"} == ids
    assert in_kafka(kafka_bootstrap, "telemetry", ids) == ids


async def test_link_cut_spool_grows_then_drains_with_nothing_lost(
    start_ingest, ingest_settings, kafka_bootstrap, tmp_path: Path
) -> None:
    running = await start_ingest(ingest_settings)
    with FaultProxy(target_port=running.server.port) as link, Spool(tmp_path / "spool.db") as spool:
        client = GatewayClient(spool, config(f"127.0.0.1:{link.port}", call_timeout_s=2.0))
        stop = asyncio.Event()
        sender = asyncio.create_task(client.run(stop))
        ids = set()
        for _ in range(50):
            ids.add(await client.enqueue("telemetry", "acme-1", CT, b"{}"))
        await asyncio.sleep(1.0)
        link.cut()
        for _ in range(200):
            ids.add(await client.enqueue("telemetry", "acme-2", CT, b"{}"))
            await asyncio.sleep(0.01)
        depth_during_cut = spool.stats().depth
        await asyncio.sleep(2.0)
        link.heal()
        drained = await client.drain(within_s=30)
        stop.set()
        await asyncio.wait_for(sender, 15)
        await client.close()
        assert depth_during_cut >= 150, "the spool should hold what the cut link could not take"
        assert drained and spool.stats().depth == 0
    assert in_kafka(kafka_bootstrap, "telemetry", ids) == ids


async def test_bad_credentials_keep_every_message_spooled(
    start_ingest, ingest_settings, tmp_path: Path
) -> None:
    running = await start_ingest(ingest_settings)
    with Spool(tmp_path / "spool.db") as spool:
        for _ in range(5):
            spool.enqueue("telemetry", "acme-1", CT, b"{}")
        async with GatewayClient(spool, config(running.target, token="wrong")) as client:
            assert not await client.drain(within_s=2)
        assert spool.stats().depth == 5 and spool.rejected() == []


async def test_mtls_certificate_identifies_the_gateway_without_a_token(
    start_ingest, ingest_settings, kafka_bootstrap, tmp_path: Path
) -> None:
    ca_pem, ca_key, ca_cert = make_ca()
    (tmp_path / "ca.crt").write_bytes(ca_pem.cert)
    cert, key = write_pem(tmp_path, "server", issue(ca_key, ca_cert, "localhost", server=True))
    settings = dataclasses.replace(
        ingest_settings,
        tls_cert_file=str(cert),
        tls_key_file=str(key),
        tls_client_ca_file=str(tmp_path / "ca.crt"),
    )
    running = await start_ingest(settings)
    client_pem = issue(ca_key, ca_cert, "gw-a", server=False)
    tls = TlsConfig(
        root_certificates=ca_pem.cert,
        client_certificate_chain=client_pem.cert,
        client_private_key=client_pem.key,
        server_name="localhost",
    )
    with Spool(tmp_path / "spool.db") as spool:
        ids = {spool.enqueue("telemetry", "acme-1", CT, b"{}").message_id for _ in range(20)}
        async with GatewayClient(spool, config(running.target, token=None, tls=tls)) as client:
            assert await client.drain(within_s=20)
    assert in_kafka(kafka_bootstrap, "telemetry", ids) == ids
