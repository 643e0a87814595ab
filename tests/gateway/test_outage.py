"""Ingest goes away while the gateway sends, and comes back on the same port.

The gateway keeps spooling through the outage; once ingest is back every message reaches
Kafka as it was spooled and the spool drains. (The link-cut test in test_client.py keeps
the connection's listener alive through a proxy; here the server itself stops, so the
gateway sees refused connections and gRPC's reconnect backoff, as on a real restart.)
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path

from headwater.gateway import NewMessage
from headwater.gateway.client import DeliveryReport, GatewayClient
from headwater.gateway.spool import Spool
from headwater.proto.device.v1 import device_message_pb2
from tests.support.faultproxy import FaultProxy
from tests.support.waiting import until

from .conftest import CT, config, kafka_copies

OUTAGE_S = 10.0
DEVICES = 3


async def test_ingest_stopped_then_restarted_on_its_port_gets_every_message(
    start_ingest, ingest_settings, kafka_bootstrap, tmp_path: Path
) -> None:
    first = await start_ingest(ingest_settings)
    port = first.server.port
    sent: dict[str, device_message_pb2.DeviceMessage] = {}
    with Spool(tmp_path / "spool.db") as spool:
        client = GatewayClient(spool, config(first.target, frame_messages=20))
        stop = asyncio.Event()
        sender = asyncio.create_task(client.run(stop))

        async def spool_readings(n: int) -> None:
            for i in range(n):
                reading = NewMessage(f"acme-outage-{i % DEVICES}", CT, b'{"temp_c": %d}' % i)
                enqueued = await client.enqueue_many("telemetry", [reading])
                sent.update((m.message_id, m) for m in enqueued.messages)
                await asyncio.sleep(0.005)

        try:
            await spool_readings(100)
            assert await client.drain(within_s=30), "ingest is up: the first hundred go through"
            await first.server.stop(grace_s=1)
            down_at = time.monotonic()
            await spool_readings(300)
            # Long enough for the senders to fail many times over and back off to their
            # longest delay, and for gRPC's channel to back off its reconnects too.
            await asyncio.sleep(max(0.0, OUTAGE_S - (time.monotonic() - down_at)))
            assert spool.depth == 300, "nothing can leave the spool while ingest is down"
            again = dataclasses.replace(ingest_settings, listen_address=f"127.0.0.1:{port}")
            await start_ingest(again)
            back_at = time.monotonic()
            drained = await client.drain(within_s=60)
            back_for = time.monotonic() - back_at
            print(f"ingest down {back_at - down_at:.1f} s; spool drained {back_for:.2f} s after")
        finally:
            stop.set()
            await asyncio.wait_for(sender, 15)
            await client.close()
        assert drained and spool.depth == 0, f"{spool.depth} messages stuck after ingest came back"
    copies = kafka_copies(kafka_bootstrap, "telemetry", set(sent), stop_when_all_found=True)
    assert set(copies) == set(sent), f"{len(set(sent) - set(copies))} messages lost"
    # A frame in flight when ingest stopped may arrive twice (same id: the enricher drops
    # the repeat); every copy is the message as it was spooled.
    assert all(m == sent[mid] for mid, ms in copies.items() for m in ms)


async def test_a_sender_backed_off_for_long_resends_as_soon_as_ingest_is_reachable(
    start_ingest, ingest_settings, kafka_bootstrap, tmp_path: Path
) -> None:
    """After a long outage a sender waits up to ``backoff_max_s`` (30 s by default) between
    retries; it must not wait that out once ingest can be reached. An hour's backoff makes
    waiting it out fail this test. (A proxy cuts the link: a restarted ingest would answer
    "not connected to Kafka yet, retry later" for its first moments, and the sender
    rightly backs off from an answer.)"""
    running = await start_ingest(ingest_settings)
    retried: list[DeliveryReport] = []
    with FaultProxy(target_port=running.server.port) as link, Spool(tmp_path / "s.db") as spool:
        link.cut()
        ids = {spool.enqueue("telemetry", "acme-b", CT, b"{}").message_id for _ in range(50)}
        hour = config(f"127.0.0.1:{link.port}", backoff_initial_s=3600.0, backoff_max_s=3600.0)
        client = GatewayClient(spool, hour, lambda r: r.status == "retry" and retried.append(r))
        stop = asyncio.Event()
        sender = asyncio.create_task(client.run(stop))
        try:
            await until(lambda: retried, 30, "a send that failed: backing off for up to an hour")
            link.heal()
            healed_at = time.monotonic()
            drained = await client.drain(within_s=20)
            print(f"drained {time.monotonic() - healed_at:.2f} s after the link was back")
        finally:
            stop.set()
            await asyncio.wait_for(sender, 15)
            await client.close()
        assert drained, "the sender waited out its backoff although ingest was reachable"
    assert set(kafka_copies(kafka_bootstrap, "telemetry", ids, stop_when_all_found=True)) == ids
