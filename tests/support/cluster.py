"""A three-node Apache Kafka cluster for the fault tests (marker ``cluster``).

The suite's single broker (``kafka_bootstrap``) stays the default: it starts in a third of
the time and memory, and no guarantee that needs no fault depends on replication. Only a
test that kills, pauses or restarts brokers, or needs ``min.insync.replicas=2`` to bite,
asks for the cluster: its module carries ``pytestmark = pytest.mark.cluster`` (deselected
from the default run, run by ``make test-cluster`` and ``.ci/run`` after the main suite).

Fixtures (registered for the whole suite by ``pytest_plugins`` in tests/conftest.py, so
any package can use them, the Kubernetes tests included):

- ``kafka_cluster``: the session's cluster, started once, stopped at the end.
- ``cluster``: the same cluster, every node running and every replica in sync before the
  test and again after it (a test that killed a node leaves no hole for the next).
- ``cluster_topic_factory``: a topic with a unique name and production's settings.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest

from headwater.kafka.admin import ensure_topics
from headwater.topics import TopicSpec
from headwater_dev.devstack.cluster import BrokerCluster
from tests.support.process_guard import session_owns


@pytest.fixture(scope="session")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerCluster]:
    """Three KRaft nodes (each broker and controller voter) on loopback; logs kept for a failure."""
    logs = tmp_path_factory.mktemp("cluster-logs")
    with BrokerCluster(log_dir=logs) as cluster:
        # A node a test killed and ``heal`` started again is the session's, not that test's.
        session_owns(lambda: [node.pid for node in cluster.nodes if node.pid])
        yield cluster


@pytest.fixture
def cluster(kafka_cluster: BrokerCluster) -> Iterator[BrokerCluster]:
    """The session's cluster, whole and in sync before and after the test."""
    kafka_cluster.heal()
    yield kafka_cluster
    kafka_cluster.heal()


@pytest.fixture
def cluster_topic_factory(kafka_cluster: BrokerCluster) -> Callable[..., str]:
    """Create a topic with a unique name, 3 replicas and the brokers' min.insync.replicas=2."""

    def make(prefix: str = "t", partitions: int = 1) -> str:
        name = f"{prefix}.{uuid.uuid4().hex[:12]}"
        ensure_topics(kafka_cluster.bootstrap_servers, [TopicSpec(name, partitions, 3)])
        return name

    return make
