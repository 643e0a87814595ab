"""Partition lanes against the real ingest service and broker: each device's order, nothing lost.

Devices over the session topic's 3 partitions start in the unknown lane and move to their
partition's lane as OKs name it, while a backlog drains and new readings keep coming: in
Kafka every message is there, each device's in its sequence order. (That a stalled
partition holds only its own lane is tests/ingest/test_cluster_faults.py's, on a cluster.)
"""

from __future__ import annotations

import asyncio
import uuid
from collections import defaultdict
from pathlib import Path

from headwater.gateway import GatewayClient, NewMessage, Spool
from headwater.gateway.answers import DeliveryReport
from tests.support.ingest_ledger import devices_over

from .conftest import CT, config, kafka_copies, sequences_in_kafka

PARTITIONS = 3
DEVICES = 12
BACKLOG, LIVE = 150, 50  # per device


async def test_lanes_keep_each_devices_order_and_lose_nothing(
    start_ingest, ingest_settings, kafka_bootstrap, tmp_path: Path
) -> None:
    ingest = await start_ingest(ingest_settings)
    devices = devices_over(f"acme-lanes-{uuid.uuid4().hex[:8]}", DEVICES, PARTITIONS)
    ok_partitions: dict[str, set[int]] = defaultdict(set)
    by_id: dict[str, str] = {}

    def report(outcome: DeliveryReport) -> None:
        if outcome.status == "delivered":
            ok_partitions[by_id[outcome.message_id]].add(outcome.partition)

    def readings(n: int) -> list[NewMessage]:
        return [NewMessage(devices[i % DEVICES], CT, b'{"temp_c": 1}') for i in range(n)]

    with Spool(tmp_path / "spool.db", synchronous="NORMAL") as spool:
        for message in spool.enqueue_many("telemetry", readings(BACKLOG * DEVICES)).messages:
            by_id[message.message_id] = message.device_id
        # Small frames: many in flight at once, over every lane.
        client = GatewayClient(spool, config(ingest.target, frame_messages=20), report)
        async with client:
            stop = asyncio.Event()
            sending = asyncio.create_task(client.run(stop))
            for _ in range(LIVE):  # while the backlog drains, devices keep reporting
                enqueued = await client.enqueue_many("telemetry", readings(DEVICES))
                by_id.update((m.message_id, m.device_id) for m in enqueued.messages)
                await asyncio.sleep(0.01)
            assert await client.drain(within_s=90), f"{spool.depth} messages left"
            stop.set()
            await sending
        assert spool.stats().counters["delivered"] == len(by_id) and not spool.rejected()

    copies = await asyncio.to_thread(kafka_copies, kafka_bootstrap, "telemetry", set(by_id))
    assert set(copies) == set(by_id), f"{len(set(by_id) - set(copies))} not in Kafka"
    # Each device's messages landed on one partition, the one its id hashes to ...
    for k, device in enumerate(devices):
        assert ok_partitions[device] == {k % PARTITIONS}, device
    # ... and in its order.
    stored = await asyncio.to_thread(sequences_in_kafka, kafka_bootstrap, "telemetry", set(by_id))
    for device in devices:
        assert stored[device] == list(range(1, BACKLOG + LIVE + 1)), device
