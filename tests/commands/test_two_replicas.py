"""Two gateways bound to one device, their streams on two replicas: one owner, each command once.

Each replica keeps its own book of commands, so without a shared owner both would send a
command to the gateway whose stream they hold (issue 38's multi-replica case). The lease
on command-owners.v1 makes the owner one for the service: the handlers' own count says
each command ran once, on the owner; once the owner's replica stops (its gateway has
nowhere else to connect), the other gateway takes over after the grace, and still none
runs twice.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from contextlib import AsyncExitStack

import pytest

from headwater.commands import CommandSender
from headwater.ingest.admission.auth import hash_token
from headwater.proto.commands.v1.command_pb2 import Command
from tests.support.ingest import TOKENS_YAML
from tests.support.waiting import until

from .support import running_gateway, wait_for_states

pytestmark = pytest.mark.timeout(120)
GRACE_S = 1.5
COMMANDS = 200
DEVICE = ("acme", "acme-001")
#: A second gateway of tenant acme bound to the same devices as gw-a (redundant gateways).
SECOND_YAML = f"""  - id: gw-a2
    tenant: acme
    token_sha256: {hash_token("token-a2")}
    devices: ["acme-*"]
"""


def send_all(topics, ids: list[str]) -> None:
    with CommandSender(topics.kafka, ["*"], topic_prefix=topics.prefix) as sender:
        for command_id in ids:
            sender.send(*DEVICE, "set-setpoint", command_id=command_id)


async def test_two_gateways_on_two_replicas_run_each_command_once_and_fail_over(
    command_topics, start_command_ingest, tokens_file, tmp_path
):
    tokens_file.write_text(TOKENS_YAML + SECOND_YAML)
    replicas = {
        "gw-a": await start_command_ingest(owner_grace_seconds=GRACE_S),
        "gw-a2": await start_command_ingest(owner_grace_seconds=GRACE_S),
    }
    runs: list[tuple[float, str, str]] = []  # (time, gateway, command id) of each run

    def handler(gateway: str):
        async def handle(command: Command) -> bytes:
            runs.append((time.monotonic(), gateway, command.command_id))
            return b"done"

        return handle

    ids = [f"r-{i:03d}" for i in range(COMMANDS)]
    first, second = ids[: COMMANDS // 2], ids[COMMANDS // 2 :]
    async with AsyncExitStack() as gateways:
        for gateway, ingest in replicas.items():
            await gateways.enter_async_context(
                running_gateway(
                    f"127.0.0.1:{ingest.port}",
                    tmp_path / f"{gateway}.db",
                    handler(gateway),
                    "gw-a",
                    token="token-a2" if gateway == "gw-a2" else "token-a",
                )
            )
        for ingest in replicas.values():
            await until(lambda i=ingest: i.commands.delivery.open_streams == 1, 30, "a stream")
        # Both replicas see the first command at once and both gateways' streams want it:
        # the first claim in the log wins, the other replica sends nothing.
        await asyncio.to_thread(send_all, command_topics, first)
        await wait_for_states(command_topics, first, {"EXECUTED"}, within_s=60)
        owners = {ingest.commands.owners.owner(DEVICE) for ingest in replicas.values()}
        assert len(owners) == 1
        owner = owners.pop()
        other = next(gw for gw in replicas if gw != owner)
        assert {gw for _, gw, _ in runs} == {owner}
        # The owner's replica stops (releasing its lease); its gateway has no other address.
        stopping_at = time.monotonic()  # it releases the lease first, then drains
        await replicas[owner].stop(grace_s=0.5)
        await asyncio.to_thread(send_all, command_topics, second)
        histories = await wait_for_states(command_topics, second, {"EXECUTED"}, within_s=60)
    counts = Counter(command_id for _, _, command_id in runs)
    assert set(counts) == set(ids)
    assert [i for i, n in counts.items() if n != 1] == []  # each ran exactly once
    ran_by = {command_id: gw for _, gw, command_id in runs}
    assert all(ran_by[i] == owner for i in first) and all(ran_by[i] == other for i in second)
    assert all(histories[i].current.gateway_id == other for i in second)
    assert [i for _, gw, i in runs if gw == other] == second  # in the order sent
    failover_s = min(at for at, gw, _ in runs if gw == other) - stopping_at
    print(f"\ntwo replicas: {COMMANDS} commands, failover {failover_s:.2f} s (grace {GRACE_S} s)")
    assert failover_s >= GRACE_S - 0.1
    assert replicas[other].commands.owners.owner(DEVICE) == other
