"""The three-node cluster itself: production's replication, a leader lost, a quorum lost.

These prove the fixture the fault tests stand on (tests/support/cluster.py), at the Kafka
level with a plain idempotent producer; the services' behaviour on it is tested beside each
service. Each test prints its figures (pytest -s).
"""

from __future__ import annotations

import itertools
import threading
import time

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, ConfigResource

from headwater.kafka.read import read_topic
from headwater_dev.devstack.cluster import BrokerCluster, replication_properties

pytestmark = pytest.mark.cluster


def _producer(cluster: BrokerCluster, timeout_ms: int) -> Producer:
    return Producer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "acks": "all",
            "enable.idempotence": True,
            "message.timeout.ms": timeout_ms,
            "log_level": 0,
        }
    )


def test_topics_get_production_replication(cluster, cluster_topic_factory) -> None:
    topic = cluster_topic_factory("prod", partitions=3)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    meta = admin.list_topics(topic, timeout=10)
    assert len(meta.brokers) == 3
    assert all(len(p.replicas) == 3 for p in meta.topics[topic].partitions.values())
    (future,) = admin.describe_configs([ConfigResource("topic", topic)]).values()
    configs = future.result(timeout=10)
    assert configs["min.insync.replicas"].value == "2"
    assert configs["unclean.leader.election.enable"].value == "false"
    # The group offsets live on three nodes too: a lost node loses no committed offset.
    assert replication_properties(3)["offsets.topic.replication.factor"] == "3"


def test_a_killed_leader_is_replaced_and_acks_all_writes_go_on(
    cluster, cluster_topic_factory
) -> None:
    topic = cluster_topic_factory("leader")
    producer = _producer(cluster, timeout_ms=60_000)
    acked: list[tuple[float, int]] = []  # (monotonic time, sequence)
    failed: list[KafkaError] = []

    def on_delivery(err, msg) -> None:
        if err is None:
            acked.append((time.monotonic(), int(msg.value())))
        else:
            failed.append(err)

    stop = threading.Event()

    def produce() -> None:
        n = 0
        while not stop.is_set():
            producer.produce(topic, str(n).encode(), on_delivery=on_delivery)
            producer.poll(0.005)
            n += 1
        producer.flush(90)

    writer = threading.Thread(target=produce)
    writer.start()
    try:
        time.sleep(2)
        leader = cluster.leader_of(topic)
        killed_at = time.monotonic()
        leader.kill()
        new_leader = cluster.leader_of(topic, timeout=60, not_on=leader)
        elected_s = time.monotonic() - killed_at
        deadline = time.monotonic() + 60
        while not any(t > killed_at + elected_s for t, _ in acked):
            assert time.monotonic() < deadline, "no acknowledgement after the election"
            time.sleep(0.1)
        time.sleep(1)
    finally:
        stop.set()
        writer.join(120)
    assert not failed, failed[:3]
    first_ok_after = min(t for t, _ in acked if t > killed_at) - killed_at
    gap = max(b - a for (a, _), (b, _) in itertools.pairwise(acked))
    print(
        f"\nleader {leader.node_id} killed: node {new_leader.node_id} led after {elected_s:.1f}s; "
        f"first acknowledgement {first_ok_after:.1f}s after the kill; longest gap {gap:.1f}s; "
        f"{len(acked)} acknowledged, 0 failed"
    )
    # The idempotent producer retried through the election: every sequence once, in order.
    assert [n for _, n in acked] == list(range(len(acked)))
    assert first_ok_after < 30


def test_reading_a_topic_to_its_end_survives_a_leader_kill(cluster, cluster_topic_factory) -> None:
    """The master-data and history readers (read_topic) wait through an election."""
    topic = cluster_topic_factory("reads", partitions=3)
    producer = _producer(cluster, timeout_ms=30_000)
    for n in range(300):
        producer.produce(topic, str(n).encode(), key=str(n).encode())
    assert producer.flush(30) == 0
    leader = cluster.leader_of(topic)
    leader.kill()
    reads, until = 0, time.monotonic() + 15  # through the session timeout and the election
    while time.monotonic() < until:
        assert len(list(read_topic(cluster.bootstrap_servers, topic, timeout_s=60))) == 300
        reads += 1
    print(f"\n{reads} reads to the end of {topic} in the 15 s after its leader was killed")


def test_two_of_three_down_never_acknowledges_and_recovers_when_one_returns(
    cluster, cluster_topic_factory
) -> None:
    topic = cluster_topic_factory("quorum")
    leader = cluster.leader_of(topic)
    others = [n for n in cluster.nodes if n is not leader]
    # The leader stays: it has the partition but cannot reach min.insync.replicas=2.
    for node in others:
        node.kill()
    results: list[KafkaError | None] = []
    short = _producer(cluster, timeout_ms=8_000)
    short.produce(topic, b"refused", on_delivery=lambda err, _m: results.append(err))
    short.flush(20)
    (err,) = results
    assert err is not None, "acknowledged with one replica of three alive"
    print(f"\ntwo of three down: the write failed with {err.name()} (retriable: {err.retriable()})")

    waiting: list[KafkaError | None] = []
    patient = _producer(cluster, timeout_ms=120_000)
    patient.produce(topic, b"waits", on_delivery=lambda err, _m: waiting.append(err))
    patient.flush(5)
    assert waiting == [], "answered while two of three nodes are down"
    returned_at = time.monotonic()
    others[0].start(wait=False)
    patient.flush(110)
    assert waiting == [None]
    back_s = time.monotonic() - returned_at
    print(f"one node back: the waiting write acknowledged {back_s:.1f}s later")


def test_cluster_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="at least one node"):
        BrokerCluster(size=0)
    with pytest.raises(ValueError, match="2 ports given for 3 nodes"):
        BrokerCluster(size=3, ports=[1, 2])
