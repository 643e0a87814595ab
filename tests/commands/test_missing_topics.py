"""Command topics missing at start: ingest serves anyway, and delivers once they exist."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from headwater.commands.sender import CommandSender, KnownDevices
from headwater.kafka.admin import ensure_topics
from headwater.kafka.settings import KafkaSettings
from headwater.topics import TopicSpec
from tests.support.waiting import until

from .conftest import CommandTopics
from .test_delivery import RawStream

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def command_topics(kafka_bootstrap: str, reports_topic: str) -> CommandTopics:
    """A prefix whose topics do not exist yet."""
    return CommandTopics(
        KafkaSettings(bootstrap_servers=kafka_bootstrap), f"m{uuid.uuid4().hex[:10]}."
    )


async def test_ingest_starts_without_command_topics_and_delivers_once_created(
    command_topics, start_command_ingest, caplog
):
    # The fixture's start waits for the book to catch up, which cannot happen yet.
    task = asyncio.create_task(start_command_ingest())
    await until(lambda: "command topics missing" in caplog.text, 60, "the missing topics logged")
    assert not task.done()  # serving, but the command book waits for its topics
    ensure_topics(
        command_topics.kafka.bootstrap_servers,
        [
            TopicSpec(command_topics.commands, 3, 1),
            TopicSpec(command_topics.status, 3, 1),
            TopicSpec(command_topics.owners, 3, 1, {"cleanup.policy": "compact"}),
        ],
    )
    ingest = await asyncio.wait_for(task, 60)
    stream = RawStream(f"127.0.0.1:{ingest.port}")
    devices = KnownDevices(lambda: {"acme/acme-001": _Master()})
    with CommandSender(command_topics.kafka, ["acme"], devices, command_topics.prefix) as sender:
        sent = await asyncio.to_thread(sender.send, "acme", "acme-001", "reboot")
    assert (await stream.next()).command.command_id == sent.command.command_id
    await stream.close()


class _Master:
    tenant = "acme"
    device_id = "acme-001"
