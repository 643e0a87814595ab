"""Fixtures for commands: per-test topics (a unique prefix) with master data, on the real broker."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass

import pytest

from headwater.kafka.admin import ensure_topics
from headwater.kafka.settings import KafkaSettings
from headwater.master.store import write
from headwater.proto.master.v1.device_master_pb2 import DeviceMaster
from headwater.topics import (
    COMMAND_OWNERS_TOPIC,
    COMMAND_REPORTS_TOPIC,
    COMMAND_STATUS_TOPIC,
    COMMANDS_TOPIC,
    MASTER_DEVICES_TOPIC,
    TopicSpec,
)
from tests.support.ingest import TOKENS, TOKENS_YAML

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
    def owners(self) -> str:
        return self.prefix + COMMAND_OWNERS_TOPIC

    @property
    def master(self) -> str:
        return self.prefix + MASTER_DEVICES_TOPIC


@pytest.fixture(scope="session")
def reports_topic(kafka_bootstrap: str) -> str:
    ensure_topics(kafka_bootstrap, [TopicSpec(COMMAND_REPORTS_TOPIC, 3, 1)])
    return COMMAND_REPORTS_TOPIC


def make_command_topics(bootstrap: str, replicas: int = 1) -> CommandTopics:
    """A test's own command topics (3 partitions; ``replicas`` copies), master data in."""
    topics = CommandTopics(KafkaSettings(bootstrap_servers=bootstrap), f"t{uuid.uuid4().hex[:10]}.")
    compact = {"cleanup.policy": "compact"}
    ensure_topics(
        bootstrap,
        [
            TopicSpec(topics.commands, 3, replicas),
            TopicSpec(topics.status, 3, replicas),
            TopicSpec(topics.owners, 3, replicas, compact),
            TopicSpec(topics.master, 1, replicas, compact),
        ],
    )
    write(
        topics.kafka,
        topics.master,
        [DeviceMaster(tenant=t, device_id=d, vendor_format="acme.v1+json") for t, d in DEVICES],
    )
    return topics


@pytest.fixture
def command_topics(kafka_bootstrap: str, reports_topic: str) -> CommandTopics:
    return make_command_topics(kafka_bootstrap)


def bearer(gateway: str = "gw-a") -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {TOKENS[gateway]}")]


@pytest.fixture
def tokens_file(tmp_path):
    path = tmp_path / "tokens.yaml"
    path.write_text(TOKENS_YAML)
    return path


@pytest.fixture
async def start_command_ingest(command_topics, tokens_file):
    """Start ingest replicas serving commands on this test's topics; stopped after it."""
    from headwater.ingest.commands.settings import CommandSettings
    from headwater.ingest.rpc.server import IngestServer
    from headwater.ingest.settings import IngestSettings
    from headwater.runtime.telemetry import create_telemetry

    started = []
    group = f"relay-{uuid.uuid4().hex[:8]}"

    async def start(ingest=None, **overrides):
        """``ingest``: IngestSettings fields to change; the rest: CommandSettings'.

        A ``relay_group`` given is used as it is (its offsets are the test's business).
        """
        if not started and "relay_group" not in overrides:
            # The reports topic is shared by every test (it is an endpoint's, unprefixed):
            # this test's relay starts after the reports of the tests before it.
            await asyncio.to_thread(
                _start_group_at_end, command_topics.kafka, COMMAND_REPORTS_TOPIC, group
            )
        settings = IngestSettings(
            **{
                "listen_address": "127.0.0.1:0",
                "tokens_file": str(tokens_file),
                "produce_timeout_seconds": 5.0,
                "drain_grace_seconds": 1.0,
                "kafka": command_topics.kafka,
                **(ingest or {}),
            }
        )
        commands = CommandSettings(
            **{
                "topic_prefix": command_topics.prefix,
                "relay_group": group,
                "expiry_check_seconds": 0.2,
                **overrides,
            }
        )
        server = IngestServer(
            settings, telemetry=create_telemetry("test-ingest"), commands=commands
        )
        await server.start()
        await server.ready(within_s=15)
        assert server.commands is not None
        await asyncio.wait_for(server.commands.feed.caught_up.wait(), 30)
        started.append(server)
        return server

    yield start
    for server in started:
        await server.stop(grace_s=0.5)


def _start_group_at_end(kafka: KafkaSettings, topic: str, group: str) -> None:
    """Commit ``group``'s offsets at the end of every partition of ``topic``."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer(kafka.consumer_config("test", group))
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        ends = [
            TopicPartition(
                topic, p, consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            )
            for p in partitions
        ]
        deadline = time.monotonic() + 30
        while True:
            try:
                consumer.commit(offsets=ends, asynchronous=False)
                return
            except KafkaException:  # a fresh broker's group coordinator is still loading
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        consumer.close()
