"""Fixtures for commands: per-test topics (a unique prefix) with master data, on the real broker."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pytest

from headwater.kafka.admin import ensure_topics
from headwater.kafka.settings import KafkaSettings
from headwater.master.store import write
from headwater.proto.master.v1.device_master_pb2 import DeviceMaster
from headwater.topics import (
    COMMAND_REPORTS_TOPIC,
    COMMAND_STATUS_TOPIC,
    COMMANDS_TOPIC,
    MASTER_DEVICES_TOPIC,
    TopicSpec,
)

#: The devices of the tests' master data: tenant acme (gw-a's) and globex (gw-b's).
DEVICES = [("acme", f"acme-{i:03d}") for i in range(1, 6)] + [("globex", "globex-001")]


@dataclass(frozen=True)
class CommandTopics:
    """One test's command topics, named with its own prefix."""

    kafka: KafkaSettings
    prefix: str

    @property
    def commands(self) -> str:
        return self.prefix + COMMANDS_TOPIC

    @property
    def status(self) -> str:
        return self.prefix + COMMAND_STATUS_TOPIC

    @property
    def master(self) -> str:
        return self.prefix + MASTER_DEVICES_TOPIC


@pytest.fixture(scope="session")
def reports_topic(kafka_bootstrap: str) -> str:
    ensure_topics(kafka_bootstrap, [TopicSpec(COMMAND_REPORTS_TOPIC, 3, 1)])
    return COMMAND_REPORTS_TOPIC


@pytest.fixture
def command_topics(kafka_bootstrap: str, reports_topic: str) -> CommandTopics:
    topics = CommandTopics(
        KafkaSettings(bootstrap_servers=kafka_bootstrap), f"t{uuid.uuid4().hex[:10]}."
    )
    ensure_topics(
        kafka_bootstrap,
        [
            TopicSpec(topics.commands, 3, 1),
            TopicSpec(topics.status, 3, 1),
            TopicSpec(topics.master, 1, 1, {"cleanup.policy": "compact"}),
        ],
    )
    write(
        topics.kafka,
        topics.master,
        [DeviceMaster(tenant=t, device_id=d, vendor_format="acme.v1+json") for t, d in DEVICES],
    )
    return topics
