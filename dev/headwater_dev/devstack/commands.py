"""Commands in the dev stack: now and then one to a simulated device, and their states.

The fleet's gateways run :func:`handle` (a simulated device applying a setpoint); the
stack sends a command every few seconds to a random device, some of them to devices whose
master data arrives late (refused UNKNOWN_DEVICE: the bad-input path shows too), and
the summary counts the commands' current states from command-status.v1.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections import Counter
from dataclasses import dataclass, field

from headwater.gateway.commands import RejectCommand
from headwater.proto.commands.v1.command_pb2 import Command

log = logging.getLogger(__name__)
#: Seconds between two commands.
EVERY_S = 2.0


async def handle(command: Command) -> bytes:
    """A simulated device: applies setpoints, refuses anything else."""
    if command.name != "set-setpoint":
        raise RejectCommand("UNKNOWN_COMMAND", f"the simulated device has no {command.name!r}")
    await asyncio.sleep(0.01)  # the device takes a moment
    return json.dumps({"applied": json.loads(command.payload or b"null")}).encode()


@dataclass
class CommandTally:
    """Commands the stack sent and refusals, by reason."""

    sent: list[str] = field(default_factory=list)
    refused: Counter[str] = field(default_factory=Counter)


async def send_now_and_then(
    bootstrap: str,
    devices: list[tuple[str, str]],
    tally: CommandTally,
    until: float,
    rng: random.Random,
) -> None:
    """Send a setpoint (every tenth: an unknown command name) to a random device."""
    from headwater.commands import CommandRefusedError, CommandSender

    with CommandSender(bootstrap, ["*"]) as sender:
        n = 0
        while time.monotonic() < until:
            tenant, device_id = rng.choice(devices)
            name = "calibrate" if n % 10 == 9 else "set-setpoint"
            payload = json.dumps({"celsius": round(rng.uniform(18, 24), 1)}).encode()
            try:
                sent = await asyncio.to_thread(
                    sender.send, tenant, device_id, name, payload, ttl_s=60
                )
                tally.sent.append(sent.command.command_id)
            except CommandRefusedError as exc:
                tally.refused[exc.reason] += 1
            n += 1
            await asyncio.sleep(EVERY_S)


def command_states(bootstrap: str, sent: list[str]) -> dict[str, int]:
    """Current state of each command sent, counted by state (from command-status.v1)."""
    from headwater.commands.history import read_histories
    from headwater.commands.model import state_name
    from headwater.kafka.settings import resolve_kafka

    histories = read_histories(resolve_kafka(bootstrap), timeout_s=30)
    counts: Counter[str] = Counter()
    for command_id in sent:
        history = histories.get(command_id)
        counts[state_name(history.current.state) if history else "NOT_FOUND"] += 1
    return dict(sorted(counts.items()))
