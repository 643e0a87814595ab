"""Commands written straight to commands.v1 (bypassing the sender) are checked where they
are delivered: one that fails is REJECTED with the reason and never reaches a gateway."""

from __future__ import annotations

import asyncio

import pytest

from headwater.commands import model
from headwater.proto.commands.v1.command_pb2 import Command

from .support import running_gateway, wait_for_states

pytestmark = pytest.mark.timeout(120)


def command(command_id: str, **fields) -> Command:
    now = model.now_ms()
    made = Command(
        command_id=command_id,
        tenant="acme",
        device_id="acme-001",
        name=fields.pop("name", "set-setpoint"),
        **fields,
    )
    made.created_time.FromMilliseconds(now)
    made.expires_time.FromMilliseconds(now + 600_000)
    return made


def write_raw(topics, records: list[tuple[bytes, Command]]) -> None:
    """Produce commands as a service with produce rights would: no sender, no checks."""
    from confluent_kafka import Producer

    producer = Producer(topics.kafka.confluent_config("test-raw-commands"))
    for key, record in records:
        producer.produce(topics.commands, key=key, value=record.SerializeToString())
    assert producer.flush(10) == 0


async def test_commands_failing_the_checks_of_delivery_are_rejected_never_run(
    command_topics, start_command_ingest, tmp_path
):
    ingest = await start_command_ingest()
    ran: list[str] = []

    async def handle(c: Command) -> bytes:
        ran.append(c.command_id)
        return b""

    good_key = b"acme/acme-001"
    bad = {
        "big": (good_key, command("big", payload=b"x" * 200_000), "PAYLOAD_TOO_LARGE"),
        "badname": (good_key, command("badname", name="bad name"), "INVALID_COMMAND"),
        "miskeyed": (b"acme/acme-002", command("miskeyed"), "KEY_MISMATCH"),
    }
    records = [(key, c) for key, c, _ in bad.values()] + [(good_key, command("fine"))]
    async with running_gateway(f"127.0.0.1:{ingest.port}", tmp_path / "spool.db", handle):
        await asyncio.to_thread(write_raw, command_topics, records)
        await wait_for_states(command_topics, ["fine"], {"EXECUTED"})
        histories = await wait_for_states(command_topics, list(bad), {"REJECTED"})
    assert ran == ["fine"]
    for command_id, (_, _, reason) in bad.items():
        assert histories[command_id].current.reason.startswith(reason + ": "), command_id
        assert histories[command_id].states == ["REJECTED"]
