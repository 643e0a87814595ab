"""Helpers of the command tests: send, wait for states, run a gateway client."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

from headwater.commands import CommandSender
from headwater.commands.history import CommandHistory, read_histories
from headwater.gateway import GatewayClient, GatewayConfig, Spool
from headwater.gateway.commands import CommandHandler
from headwater.proto.commands.v1.command_pb2 import Command
from tests.support.ingest import TOKENS


def send(topics, device="acme-001", tenant="acme", **kw) -> Command:
    """Send one command (blocking) with a sender allowed every tenant."""
    with CommandSender(topics.kafka, ["*"], topic_prefix=topics.prefix) as sender:
        return sender.send(tenant, device, kw.pop("name", "set-setpoint"), **kw).command


async def wait_for_states(
    topics, ids: list[str], states: set[str], within_s: float = 30.0
) -> dict[str, CommandHistory]:
    """Poll command-status.v1 until every id's current state is one of ``states``."""
    from headwater.commands.model import state_name

    deadline = time.monotonic() + within_s
    while True:
        histories = await asyncio.to_thread(read_histories, topics.kafka, topics.status, 10)
        missing = [
            i
            for i in ids
            if i not in histories or state_name(histories[i].current.state) not in states
        ]
        if not missing:
            return histories
        if time.monotonic() > deadline:
            seen = {
                i: [state_name(r.state) for r in histories[i].records]
                for i in missing
                if i in histories
            }
            raise AssertionError(f"not {states} within {within_s}s: {missing[:5]} (seen {seen})")
        await asyncio.sleep(0.3)


@contextlib.asynccontextmanager
async def running_gateway(
    target: str,
    spool_path: Path,
    handler: CommandHandler,
    gateway: str = "gw-a",
    token: str | None = None,
) -> AsyncIterator[GatewayClient]:
    """A gateway client with a command handler, running until the block ends.

    ``token``: for a gateway the tests add to the tokens file (default: ``TOKENS[gateway]``).
    """
    config = GatewayConfig(
        target=target,
        token=token or TOKENS[gateway],
        call_timeout_s=5.0,
        backoff_initial_s=0.05,
        backoff_max_s=0.5,
    )
    with Spool(spool_path, synchronous="NORMAL") as spool:
        async with GatewayClient(spool, config, commands=handler) as client:
            stop = asyncio.Event()
            task = asyncio.create_task(client.run(stop))
            try:
                yield client
            finally:
                stop.set()
                await asyncio.wait_for(task, 15)
