"""The commands benchmark's traffic: commands written open loop, gateways that run them, statuses.

Shared by the online measurement (``command_bench``) and the offline one
(``command_offline``), which each import it; neither imports the other's parts.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from headwater.kafka.settings import KafkaSettings
from headwater.proto.commands.v1.command_pb2 import Command
from headwater.proto.commands.v1.command_status_pb2 import CommandStatus
from headwater.topics import scoped_key

#: The tenant of every benchmark gateway and command.
TENANT = "bench"


def write_commands(
    kafka: KafkaSettings,
    topic: str,
    devices: list[str],
    rate: float,
    seconds: float,
    ttl_ms: Callable[[int], int] = lambda _n: 600_000,
    id_prefix: str = "b",
) -> list[str]:
    """Write commands open loop at ``rate``/s, round robin; return their ids in order.

    Command ``n`` is ``<id_prefix><n>``, to device ``devices[n % len(devices)]``, and
    expires ``ttl_ms(n)`` after it is written.
    """
    from confluent_kafka import Producer

    producer = Producer(kafka.producer_config("headwater-bench-commands") | {"linger.ms": 5})
    # Connected, with the topic's metadata and an idempotent producer id, before the clock
    # starts: the first commands would otherwise wait ~0.5 s for them in this producer, and
    # that wait (before anything is written) was timed as delivery (the p99 of a 30 s run).
    # An empty record: ingest's command feed skips it.
    producer.produce(topic, b"", b"bench-warm-up")
    producer.flush(30)
    ids: list[str] = []
    started = time.monotonic()
    total = int(rate * seconds)
    for n in range(total):
        due = started + n / rate
        wait = due - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        now_ms = int(time.time() * 1000)
        device = devices[n % len(devices)]
        command = Command(
            command_id=f"{id_prefix}{n}",
            tenant=TENANT,
            device_id=device,
            name="noop",
            payload=b"{}",
        )
        command.created_time.FromMilliseconds(now_ms)
        command.expires_time.FromMilliseconds(now_ms + ttl_ms(n))
        producer.produce(topic, command.SerializeToString(), scoped_key(TENANT, device))
        producer.poll(0)
        ids.append(command.command_id)
    producer.flush(30)
    return ids


async def run_gateways(
    target: str,
    gateways: int,
    workdir: Path,
    stored: dict[str, float],
    executed: dict[str, float],
    stop: asyncio.Event,
) -> None:
    """Run ``gateways`` gateway clients until ``stop``; note when each command is stored and run."""
    from headwater.gateway import GatewayClient, GatewayConfig, Spool

    async def handle(command: Command) -> bytes:
        executed[command.command_id] = time.time()
        return b""

    async def one(g: int) -> None:
        config = GatewayConfig(target=target, token=f"token-{g}", backoff_initial_s=0.05)
        with Spool(workdir / f"gw-{g}.db", synchronous="NORMAL") as spool:
            async with GatewayClient(spool, config, commands=handle) as client:
                receiver = client._receiver
                assert receiver is not None
                store_many = receiver.store_many

                def timed_store(commands: list[Command]) -> int:
                    new = store_many(commands)
                    now = time.time()
                    for command in commands:
                        stored.setdefault(command.command_id, now)
                    return new

                receiver.store_many = timed_store  # type: ignore[method-assign]
                await client.run(stop)

    await asyncio.gather(*(one(g) for g in range(gateways)))


def read_statuses(kafka: KafkaSettings, topic: str) -> dict[tuple[str, int], int]:
    """First broker timestamp (ms) of each (command id, state)."""
    from headwater_dev.devstack.readback import read_topic

    first: dict[tuple[str, int], int] = {}
    for msg in read_topic(kafka, topic, timeout_s=120):
        status = CommandStatus.FromString(msg.value() or b"")
        first.setdefault((status.command_id, status.state), msg.timestamp()[1])
    return first
