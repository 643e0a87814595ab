"""``headwater bench commands --offline-seconds N``: gateways away for N seconds, then back.

Issue 26's second target: a gateway offline for 10 minutes receives every unexpired
command in order when it reconnects; expired ones are EXPIRED, never delivered. After the
online measurement (its gateways stopped), commands are written in the first half of the
``N`` seconds at ``--offline-rate`` while no gateway is connected: every fifth with a time
to live of a quarter of the gap (so it has expired before the gateways are back), the
others with the gap plus ten minutes. At ``N`` seconds the gateways connect again, with the
spools they had, and the run waits until every unexpired command has run (at most
``drain_within_s``).

Reported: what was written and how much of it should expire; per device, whether the
commands ran in the order they were written (``out_of_order_devices``); commands lost
(unexpired and never run), expired ones that ran anyway, expired ones without an EXPIRED
status; and the seconds from reconnecting to the last command run.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from headwater.kafka.settings import KafkaSettings
from headwater.proto.commands.v1.command_status_pb2 import CommandState
from headwater.topics import COMMAND_STATUS_TOPIC, COMMANDS_TOPIC
from headwater_dev.bench import command_traffic

#: Every this many commands written while away, one that expires before they are back.
EXPIRING_EVERY = 5


async def measure(
    kafka: KafkaSettings,
    prefix: str,
    target: str,
    workdir: Path,
    devices: list[str],
    options: dict[str, Any],
    drain_within_s: float = 300.0,
) -> dict[str, Any]:
    """Write while the gateways are away, bring them back, check what they ran."""
    gap_s = options["offline_seconds"]
    short_ms, long_ms = int(gap_s * 250), int((gap_s + 600) * 1000)

    def ttl_ms(n: int) -> int:
        return short_ms if n % EXPIRING_EVERY == 0 else long_ms

    started = time.monotonic()
    written = await asyncio.to_thread(
        command_traffic.write_commands,
        kafka,
        prefix + COMMANDS_TOPIC,
        devices,
        options["offline_rate"],
        gap_s / 2,
        ttl_ms,
        "off",
    )
    await asyncio.sleep(max(0.0, gap_s - (time.monotonic() - started)))
    expiring = {c for n, c in enumerate(written) if n % EXPIRING_EVERY == 0}
    ran: dict[str, float] = {}  # command id -> when its handler ran, in the order they ran
    stop = asyncio.Event()
    back, back_wall = time.monotonic(), time.time()
    clients = asyncio.create_task(
        command_traffic.run_gateways(target, options["gateways"], workdir, {}, ran, stop)
    )
    expected = [c for c in written if c not in expiring]
    deadline = back + drain_within_s
    while not set(expected) <= ran.keys() and time.monotonic() < deadline:  # noqa: ASYNC110 - a dict filled by handlers
        await asyncio.sleep(0.2)
    drained_s = max((ran[c] for c in expected if c in ran), default=back_wall) - back_wall
    await asyncio.sleep(3.0)  # expired ones a moment to show up too, if they were to run
    stop.set()
    await asyncio.wait_for(clients, 30)
    statuses = await asyncio.to_thread(
        command_traffic.read_statuses, kafka, prefix + COMMAND_STATUS_TOPIC
    )
    device_of = {c: devices[n % len(devices)] for n, c in enumerate(written)}  # round robin
    return {
        "offline_seconds": gap_s,
        "written": len(written),
        "expiring": len(expiring),
        "ran": sum(1 for c in ran if c in device_of),
        "lost": sum(1 for c in expected if c not in ran),
        "expired_but_ran": sum(1 for c in expiring if c in ran),
        "expired_without_status": sum(
            1 for c in expiring if (c, CommandState.COMMAND_STATE_EXPIRED) not in statuses
        ),
        "out_of_order_devices": _out_of_order(written, ran, device_of),
        "drain_after_reconnect_s": round(drained_s, 2),
    }


def _out_of_order(written: list[str], ran: dict[str, float], device_of: dict[str, str]) -> int:
    """Devices whose commands did not run in the order they were written."""
    order = {c: n for n, c in enumerate(ran)}
    by_device: dict[str, list[str]] = {}
    for c in written:
        if c in order:
            by_device.setdefault(device_of[c], []).append(c)
    return sum(1 for cs in by_device.values() if cs != sorted(cs, key=order.__getitem__))
