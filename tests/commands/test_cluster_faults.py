"""The command relay on a three-node cluster while the leader of its partitions is killed.

An ingest replica serves commands from the cluster; a gateway runs them and reports each
outcome through ingest (``ingest.command-status.v1``), which the relay reads in its group
and writes to ``command-status.v1``. Mid-stream the node leading the reports topic's
partition 0 is SIGKILLed. Every command must still end EXECUTED on ``command-status.v1``
(nothing lost; an outcome relayed twice is the documented at-least-once, readers fold it),
and the relay's group must end committed at the end of every reports partition (no offset
reset). Bounded: loopback only, a bounded count and time; the cluster is healed after.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter

import pytest

from headwater.commands.history import read_histories
from headwater.commands.model import state_name
from headwater.ingest.commands.settings import CommandSettings
from headwater.ingest.settings import IngestSettings
from headwater.kafka.admin import ensure_topics
from headwater.kafka.settings import KafkaSettings
from headwater.topics import COMMAND_REPORTS_TOPIC, TopicSpec
from headwater_dev.devstack.cluster import BrokerCluster

from .conftest import DEVICES, CommandTopics, make_command_topics
from .support import running_gateway, send, wait_for_states

pytestmark = pytest.mark.cluster
COMMANDS = 60
#: Commands are sent over this long; the leader is killed a third of the way in.
SEND_OVER_S = 15.0


@pytest.fixture
def cluster_command_topics(cluster: BrokerCluster) -> CommandTopics:
    """This test's command topics on the cluster (3 partitions, 3 replicas), master data in."""
    ensure_topics(cluster.bootstrap_servers, [TopicSpec(COMMAND_REPORTS_TOPIC, 3, 3)])
    return make_command_topics(cluster.bootstrap_servers, replicas=3)


def relay_committed_at_ends(kafka: KafkaSettings, group: str) -> list[tuple[int, int, int]]:
    """(partition, committed, end) of the reports topic where they differ."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(kafka.consumer_config("test", group))
    try:
        tps = [TopicPartition(COMMAND_REPORTS_TOPIC, p) for p in range(3)]
        committed = consumer.committed(tps, timeout=10)
        ends = [consumer.get_watermark_offsets(tp, timeout=10)[1] for tp in tps]
        return [
            (tp.partition, tp.offset, end)
            for tp, end in zip(committed, ends, strict=True)
            if tp.offset != end
        ]
    finally:
        consumer.close()


async def test_relay_across_a_leader_kill_loses_no_outcome_and_resets_no_offset(
    cluster: BrokerCluster, cluster_command_topics: CommandTopics, tokens_file, tmp_path
) -> None:
    from headwater.ingest.rpc.server import IngestServer
    from headwater.runtime.telemetry import create_telemetry

    topics = cluster_command_topics
    group = f"relay-{uuid.uuid4().hex[:8]}"
    server = IngestServer(
        IngestSettings(
            listen_address="127.0.0.1:0",
            tokens_file=str(tokens_file),
            drain_grace_seconds=1.0,
            kafka=topics.kafka,
        ),
        telemetry=create_telemetry("test-ingest"),
        commands=CommandSettings(
            topic_prefix=topics.prefix, relay_group=group, expiry_check_seconds=0.2
        ),
    )
    await server.start()
    ran: Counter[str] = Counter()

    async def handle(command) -> bytes:
        ran[command.command_id] += 1
        return b""

    try:
        await server.ready(within_s=30)
        assert server.commands is not None
        await asyncio.wait_for(server.commands.feed.caught_up.wait(), 60)
        ids: list[str] = []
        async with running_gateway(f"127.0.0.1:{server.port}", tmp_path / "spool.db", handle):
            leader = cluster.leader_of(COMMAND_REPORTS_TOPIC, 0)
            led = [p for p in range(3) if cluster.leader_of(COMMAND_REPORTS_TOPIC, p) is leader]
            for i in range(COMMANDS):
                device = DEVICES[i % 5][1]  # gw-a's devices: acme-001..005
                command = await asyncio.to_thread(send, topics, device=device)
                ids.append(command.command_id)
                if i == COMMANDS // 3:
                    killed_at = time.monotonic()
                    await asyncio.to_thread(leader.kill)
                await asyncio.sleep(SEND_OVER_S / COMMANDS)
            await wait_for_states(topics, ids, {"EXECUTED"}, within_s=120)
            all_executed_s = time.monotonic() - killed_at
        deadline = time.monotonic() + 60
        while behind := await asyncio.to_thread(relay_committed_at_ends, topics.kafka, group):
            assert time.monotonic() < deadline, f"relay not committed at the ends: {behind}"
            await asyncio.sleep(0.5)
    finally:
        await server.stop(grace_s=0.5)
    assert all(ran[i] == 1 for i in ids), "a command ran twice"
    histories = await asyncio.to_thread(read_histories, topics.kafka, topics.status, 10)
    executed = Counter(
        i for i in ids for r in histories[i].records if state_name(r.state) == "EXECUTED"
    )
    assert set(executed) == set(ids)
    print(
        f"\nrelay across a leader kill (node {leader.node_id}, reports partitions {led}): "
        f"{COMMANDS} commands, all EXECUTED on command-status.v1 {all_executed_s:.1f}s after "
        f"the kill, {sum(executed.values())} EXECUTED records (a connected gateway's outcome "
        "comes by its stream and again as its relayed report; readers fold repeats), the "
        "relay group committed at every partition's end"
    )
