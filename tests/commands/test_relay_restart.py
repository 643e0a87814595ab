"""Outcomes that gateways reported while ingest was down are visible seconds after it
comes back: SIGKILL the replica (its relay does not leave the group), let the gateway run
commands meanwhile, restart the replica under the same pod name, and time each outcome."""

from __future__ import annotations

import asyncio
import signal
import time
import uuid

import pytest

from headwater.commands.history import read_histories
from headwater.commands.model import state_name
from headwater_dev.devstack.ports import free_port
from tests.support.ingest import TOKENS_YAML

from .support import running_gateway, send
from .test_replica_kill import serving, start_replica

pytestmark = pytest.mark.timeout(240)
COMMANDS = 30
HANDLER_S = 0.3
#: Issue 38's target is a p99 of 5 s (measured 0.22 s); the figure is printed. The test holds
#: the line the fix moved: before it, the relay's group waited out the killed member's 45 s
#: session (32-42 s measured), which no slower machine turns into less than this.
P99_BOUND_S = 20.0


async def test_outcomes_reported_during_an_outage_are_visible_within_seconds_of_the_restart(
    command_topics, tmp_path
):
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(TOKENS_YAML)
    group = f"relay-{uuid.uuid4().hex[:8]}"
    port = free_port()

    def replica():
        return start_replica(
            command_topics, port, tokens, group, tmp_path / "ingest.log", POD_NAME="ingest-0"
        )

    async def handle(command) -> bytes:
        await asyncio.sleep(HANDLER_S)
        return b""

    proc = replica()
    spool = tmp_path / "spool.db"
    try:
        await serving(port)
        ids = [f"r-{i:02d}" for i in range(COMMANDS)]
        async with running_gateway(f"127.0.0.1:{port}", spool, handle):
            await asyncio.to_thread(send, command_topics, command_id="warm-up")
            await wait_visible(command_topics, ["warm-up"], 60)  # the relay is in its group
        for command_id in ids:  # waiting in ingest's book: the gateway is away
            await asyncio.to_thread(send, command_topics, command_id=command_id)
        async with running_gateway(f"127.0.0.1:{port}", spool, handle):
            # All delivered at once (in the spool), most still to run: kill the replica.
            await wait_states(command_topics, ids, 30, lambda s: s != "QUEUED")
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
            await asyncio.sleep(COMMANDS * HANDLER_S + 1)  # they all run meanwhile
            histories = await asyncio.to_thread(
                read_histories, command_topics.kafka, command_topics.status, 10
            )
            during = [i for i in ids if "EXECUTED" not in histories[i].states]
            proc = replica()
            await serving(port)
            back = time.monotonic()
            seen = await wait_visible(command_topics, during, 120)
    finally:
        proc.kill()
        proc.wait(10)
    assert len(during) >= COMMANDS // 2  # most ran during the outage
    delays = sorted(at - back for at in seen.values())
    p50, p99 = delays[len(delays) // 2], delays[min(len(delays) - 1, int(len(delays) * 0.99))]
    print(
        f"\n{len(during)} outcomes reported during the outage, visible after the restart: "
        f"p50 {p50:.2f} s, p99 {p99:.2f} s, "
        f"max {delays[-1]:.2f} s"
    )
    assert p99 <= P99_BOUND_S


async def wait_states(topics, ids, within_s, accept) -> None:
    deadline = time.monotonic() + within_s
    while True:
        histories = await asyncio.to_thread(read_histories, topics.kafka, topics.status, 10)
        if all(i in histories and accept(state_name(histories[i].current.state)) for i in ids):
            return
        assert time.monotonic() < deadline, "states not reached"
        await asyncio.sleep(0.2)


async def wait_visible(topics, ids, within_s) -> dict[str, float]:
    """When (monotonic) each id's EXECUTED was first seen on command-status.v1."""
    seen: dict[str, float] = {}
    deadline = time.monotonic() + within_s
    while len(seen) < len(ids):
        histories = await asyncio.to_thread(read_histories, topics.kafka, topics.status, 10)
        now = time.monotonic()
        for i in ids:
            if i not in seen and i in histories and "EXECUTED" in histories[i].states:
                seen[i] = now
        assert now < deadline, f"not visible: {sorted(set(ids) - set(seen))[:5]}"
        await asyncio.sleep(0.1)
    return seen
