"""The gateway client against the real ingest service: delivery, rejections, pushback, outages."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path

import pytest

from headwater.gateway import SpoolFullError, SpoolLimits
from headwater.gateway.client import DeliveryReport, GatewayClient, TlsConfig
from headwater.gateway.metrics import GatewayMetrics
from headwater.gateway.spool import Spool
from headwater.proto.device.v1 import device_message_pb2
from tests.support.faultproxy import FaultProxy
from tests.support.tls_certs import issue, make_ca, write_pem

from .conftest import CT, config, in_kafka, metric_points, new_meter


@pytest.mark.parametrize("use_stream", [True, False], ids=["stream", "batch"])
async def test_every_spooled_message_is_delivered_once_and_leaves_the_spool(
    start_ingest, ingest_settings, kafka_bootstrap, tmp_path: Path, use_stream: bool
) -> None:
    running = await start_ingest(ingest_settings)
    outcomes: list[DeliveryReport] = []
    reader, meter = new_meter()
    with Spool(tmp_path / "spool.db") as spool:
        telemetry = {
            spool.enqueue("telemetry", f"acme-{i % 7}", CT, b'{"temp_c": 1}').message_id
            for i in range(450)
        }
        alarms = {
            spool.enqueue(
                "alarms", "acme-1", "application/vnd.acme.alarm.v1+json", b"{}"
            ).message_id
            for _ in range(30)
        }
        ids = telemetry | alarms
        client = GatewayClient(
            spool,
            config(running.target, use_stream=use_stream, frame_messages=50),
            outcomes.append,
            metrics=GatewayMetrics(spool, meter),
        )
        async with client:
            assert await client.drain(within_s=30)
        assert spool.stats().depth == 0
        assert spool.stats().counters["delivered"] == len(ids)
        points = metric_points(reader)
    delivered = [o for o in outcomes if o.status == "delivered"]
    assert {o.message_id for o in delivered} == ids and len(delivered) == len(ids)
    assert all(o.partition >= 0 and o.offset >= 0 for o in delivered)
    assert in_kafka(kafka_bootstrap, "telemetry", telemetry) == telemetry
    assert in_kafka(kafka_bootstrap, "alarms", alarms) == alarms
    # Throughput and depth as metrics.
    by_endpoint = {"telemetry": 450, "alarms": 30}
    for endpoint, n in by_endpoint.items():
        key = (("endpoint", endpoint), ("outcome", "delivered"))
        assert points[("headwater.gateway.messages", key)] == n
        assert points[("headwater.gateway.delivered", (("endpoint", endpoint),))] > 0
    assert points[("headwater.gateway.spool.messages", ())] == 0


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
        too_big = spool.enqueue("telemetry", "acme-1", CT, b"x" * 300_000).message_id
        foreign = spool.enqueue("telemetry", "globex-1", CT, b"{}").message_id  # not gw-a's
        good_after = [spool.enqueue("telemetry", "acme-1", CT, b"{}").message_id for _ in range(10)]
        async with GatewayClient(spool, config(running.target, frame_messages=8)) as client:
            assert await client.drain(within_s=20)
        rejected = {r.message_id: (r.code, r.reason) for r in spool.rejected()}
        assert rejected == {
            "not a valid id!": ("INVALID_ARGUMENT", "INVALID_MESSAGE"),
            too_big: ("INVALID_ARGUMENT", "PAYLOAD_TOO_LARGE"),
            foreign: ("PERMISSION_DENIED", "DEVICE_NOT_PERMITTED"),
        }
        assert all(r.detail for r in spool.rejected())  # the server's explanation is kept
        counters = spool.stats().counters
        assert counters["delivered"] == len(good_before) + len(good_after)
        assert "retried" not in counters  # nothing was tried twice


async def test_resource_exhausted_pushback_is_honoured_and_nothing_is_lost(
    start_ingest, ingest_settings, kafka_bootstrap, tmp_path: Path
) -> None:
    # A budget of ~1 frame: concurrent frames get RESOURCE_EXHAUSTED with a RetryInfo delay.
    delay_s = 0.3
    tight = dataclasses.replace(
        ingest_settings, max_inflight_bytes=4096, overload_retry_delay_s=delay_s
    )
    running = await start_ingest(tight)
    seen: list[tuple[float, DeliveryReport]] = []
    with Spool(tmp_path / "spool.db") as spool:
        ids = {spool.enqueue("telemetry", "acme-1", CT, b"x" * 300).message_id for _ in range(100)}
        client = GatewayClient(
            spool,
            config(running.target, frame_messages=10, window_frames=4),
            lambda o: seen.append((time.monotonic(), o)),
        )
        async with client:
            assert await client.drain(within_s=60)
    pushed_back = {o.message_id: t for t, o in seen if o.code == "RESOURCE_EXHAUSTED"}
    assert pushed_back, "the tight budget never pushed back"
    assert {o.reason for _, o in seen if o.status == "retry"} == {"OVERLOADED"}
    delivered_at = {o.message_id: t for t, o in seen if o.status == "delivered"}
    assert set(delivered_at) == ids
    # No refused message was sent again before the server's RetryInfo delay had passed.
    waited = min(delivered_at[m] - t for m, t in pushed_back.items())
    assert waited >= delay_s * 0.9, f"resent {waited:.3f}s after a {delay_s}s pushback"
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
            ids.add((await client.enqueue("telemetry", "acme-1", CT, b"{}")).message_id)
        assert await client.drain(within_s=10)  # the link works
        link.cut()
        depth = []
        for _ in range(200):
            ids.add((await client.enqueue("telemetry", "acme-2", CT, b"{}")).message_id)
            depth.append(spool.depth)
            await asyncio.sleep(0.005)
        await asyncio.sleep(1.0)
        depth_during_cut = spool.depth
        link.heal()
        drained = await client.drain(within_s=30)
        stop.set()
        await asyncio.wait_for(sender, 15)
        await client.close()
        assert depth == sorted(depth) and depth_during_cut == 200, "the spool should grow"
        assert drained and spool.depth == 0
        assert spool.stats().counters["delivered"] >= len(ids)
    assert in_kafka(kafka_bootstrap, "telemetry", ids) == ids


@pytest.mark.parametrize("when_full", ["refuse", "drop_oldest"])
async def test_a_full_spool_applies_its_policy_and_counts_it_while_the_link_is_down(
    start_ingest, ingest_settings, kafka_bootstrap, tmp_path: Path, when_full: str
) -> None:
    running = await start_ingest(ingest_settings)
    reader, meter = new_meter()
    limits = SpoolLimits(max_bytes=10_000, when_full=when_full)  # type: ignore[arg-type]
    with (
        FaultProxy(target_port=running.server.port) as link,
        Spool(tmp_path / "s.db", limits) as spool,
    ):
        link.cut()
        client = GatewayClient(
            spool,
            config(f"127.0.0.1:{link.port}", call_timeout_s=1.0),
            metrics=GatewayMetrics(spool, meter),
        )
        stop = asyncio.Event()
        sender = asyncio.create_task(client.run(stop))
        kept: list[str] = []
        dropped: list[str] = []
        refused = 0
        for i in range(40):
            try:
                result = await client.enqueue("telemetry", "acme-1", CT, b"%03d" % i + b"x" * 400)
            except SpoolFullError:
                refused += 1
                continue
            kept.append(result.message_id)
            dropped += result.dropped
        link.heal()
        assert await client.drain(within_s=30)
        stop.set()
        await sender
        await client.close()
        counters = spool.stats().counters
        points = metric_points(reader)
    delivered = [m for m in kept if m not in dropped]
    lost = refused + len(dropped)
    assert lost > 0 and len(delivered) + lost == 40
    if when_full == "refuse":
        assert refused and not dropped and delivered == kept
        assert counters["refused"] == refused
    else:
        assert dropped == kept[: len(dropped)] and not refused  # the oldest went first
        assert counters["dropped_oldest"] == len(dropped)
    by_reason = {
        key[0][1]: value
        for (name, key), value in points.items()
        if name == "headwater.gateway.spool.dropped_messages"
    }
    assert by_reason == {
        "refused": refused,
        "dropped_oldest": len(dropped),
        "expired": 0,
    }
    # What the policy kept arrived; what it dropped never left the gateway.
    assert in_kafka(kafka_bootstrap, "telemetry", set(kept)) == set(delivered)


@pytest.mark.parametrize("use_stream", [True, False], ids=["stream", "batch"])
async def test_frames_too_big_for_the_server_shrink_instead_of_being_rejected(
    start_ingest, ingest_settings, kafka_bootstrap, tmp_path: Path, use_stream: bool
) -> None:
    running = await start_ingest(dataclasses.replace(ingest_settings, max_batch_messages=10))
    with Spool(tmp_path / "spool.db") as spool:
        ids = {spool.enqueue("telemetry", "acme-1", CT, b"{}").message_id for _ in range(100)}
        cfg = config(running.target, frame_messages=50, use_stream=use_stream)
        async with GatewayClient(spool, cfg) as client:
            assert await client.drain(within_s=30)
        assert spool.rejected() == []
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


async def test_one_client_runs_once(start_ingest, ingest_settings, tmp_path: Path) -> None:
    running = await start_ingest(ingest_settings)
    with Spool(tmp_path / "spool.db") as spool:
        async with GatewayClient(spool, config(running.target)) as client:
            stop = asyncio.Event()
            first = asyncio.create_task(client.run(stop))
            await asyncio.sleep(0.1)
            with pytest.raises(RuntimeError, match="running already"):
                await client.run(stop)
            await client.enqueue("telemetry", "acme-1", CT, b"{}")
            assert await client.drain(within_s=10)  # waits on the running sender
            assert not first.done()
            stop.set()
            await first


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
