"""Clean stops and restarts of a gateway never run a command twice.

A stop lets the running handler finish and writes its outcome before it returns (it used
to cancel the runner and drop up to 50 ms of finished outcomes: the last 3-8 commands ran
again after each restart). Counted by the handler itself, not by status records.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter

import pytest

from headwater.commands import CommandSender

from .support import running_gateway, wait_for_states

COMMANDS = 300
HANDLER_S = 0.005


async def stop_and_restart(command_topics, start_command_ingest, tmp_path, cycles: int) -> None:
    ingest = await start_command_ingest()
    target = f"127.0.0.1:{ingest.port}"
    ids = [f"s-{i:03d}" for i in range(COMMANDS)]

    def send_all() -> None:
        with CommandSender(command_topics.kafka, ["*"], topic_prefix=command_topics.prefix) as s:
            for command_id in ids:
                s.send("acme", "acme-001", "set-setpoint", command_id=command_id)

    ran: list[str] = []

    async def handle(command) -> bytes:
        ran.append(command.command_id)
        await asyncio.sleep(HANDLER_S)
        return b""

    await asyncio.to_thread(send_all)
    rng = random.Random(38)
    started = time.monotonic()
    for _ in range(cycles):
        async with running_gateway(target, tmp_path / "spool.db", handle):
            # Stop at any moment: while commands arrive, run, or after all have run.
            await asyncio.sleep(rng.uniform(0.005, 0.08))
    async with running_gateway(target, tmp_path / "spool.db", handle):  # the rest, if any
        await wait_for_states(command_topics, ids, {"EXECUTED"}, within_s=120)
    again = {i: n for i, n in Counter(ran).items() if n > 1}
    print(
        f"\n{cycles} clean stops and restarts in {time.monotonic() - started:.1f} s: "
        f"{len(set(ran))} commands run, {len(again)} run again"
    )
    assert again == {}
    assert sorted(set(ran)) == ids and ran == sorted(ran)  # in order, each once


@pytest.mark.timeout(300)
async def test_clean_stops_and_restarts_never_rerun_a_command(
    command_topics, start_command_ingest, tmp_path
):
    await stop_and_restart(command_topics, start_command_ingest, tmp_path, cycles=60)


@pytest.mark.load  # the 60 above are the suite's; these run after it (make test-load)
@pytest.mark.timeout(1200)
async def test_a_thousand_clean_stops_and_restarts_never_rerun_a_command(
    command_topics, start_command_ingest, tmp_path
):
    await stop_and_restart(command_topics, start_command_ingest, tmp_path, cycles=1000)
