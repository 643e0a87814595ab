"""A real multi-node Apache Kafka cluster (KRaft) on loopback, to fail on purpose.

Each node is an :class:`~headwater_dev.devstack.broker.EmbeddedBroker` process running
broker and controller together (combined mode); every node votes in the controller quorum,
so three nodes survive the loss of any one. Topics get production's settings, as the chart
and ``k8s/kafka-topics.yaml`` ship them: replication factor 3, ``min.insync.replicas=2``,
unclean leader election off. On such a cluster a partition leader can move, ``acks=all``
means two copies at least, and losing two nodes stops writes instead of losing them.

The suite's fault tests (marker ``cluster``), ``headwater devstack up --brokers 3`` and
``headwater chaos`` use it; one broker stays the default wherever no fault is provoked
(a third of the memory, a third of the start time: docs/embedded-broker.md).
"""

from __future__ import annotations

import contextlib
import re
import shutil
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from headwater.errors import HeadwaterError
from headwater_dev.devstack.broker import (
    START_TIMEOUT_S,
    BrokerStartError,
    EmbeddedBroker,
    free_port,
    wait_ready,
)

#: The size of a cluster when one is asked for: the smallest that survives one lost node
#: with ``min.insync.replicas=2`` and still has a controller majority.
CLUSTER_SIZE = 3
#: Seconds to wait for every partition to be back in sync after a node returns.
IN_SYNC_TIMEOUT_S = 120.0
#: The line a node's Raft client logs when it becomes the active controller. Neither the
#: Python client nor the broker's jars (no kafka-tools) can ask the quorum who leads it.
_BECAME_LEADER = re.compile(
    r"Completed transition to Leader\(localVoterNode=VoterNode\(voterKey=ReplicaKey\(id=(\d+)"
    r".*?\bepoch=(\d+)"
)


class ClusterError(HeadwaterError, RuntimeError):
    """The cluster did not reach the state asked for in time; the message says which."""


def replication_properties(size: int) -> dict[str, str]:
    """Return the broker defaults of a ``size``-node cluster: production's replication.

    Every topic, the internal ones included, gets ``min(size, 3)`` replicas and needs two of
    them in sync to accept an ``acks=all`` write; an out-of-sync replica never becomes leader.
    """
    replicas = str(min(size, 3))
    min_isr = str(min(size, 2))
    return {
        "default.replication.factor": replicas,
        "min.insync.replicas": min_isr,
        "unclean.leader.election.enable": "false",
        "offsets.topic.replication.factor": replicas,
        "transaction.state.log.replication.factor": replicas,
        "transaction.state.log.min.isr": min_isr,
        "share.coordinator.state.topic.replication.factor": replicas,
        "share.coordinator.state.topic.min.isr": min_isr,
    }


def out_of_sync(addresses: Sequence[str], topics: Iterable[str] | None = None) -> list[str]:
    """Return what keeps the cluster at ``addresses`` (every node's) from being in sync.

    Empty when every node answers, sees every other, and every partition (of ``topics``,
    by default all) has a leader and all its replicas in sync. Each node is asked itself:
    right after a kill the others still list it for a broker session (9 s), and its
    replicas as in sync, so their metadata alone would pass.

    Raises:
        confluent_kafka.KafkaException: a node did not answer.
    """
    wanted = set(topics) if topics is not None else None
    for address in addresses:
        direct = AdminClient({"bootstrap.servers": address, "log_level": 0})
        if len(direct.list_topics(timeout=5).brokers) < len(addresses):
            return [f"{address} does not see every broker yet"]
    meta = AdminClient({"bootstrap.servers": ",".join(addresses), "log_level": 0}).list_topics(
        timeout=10
    )
    return [
        f"{name}[{p.id}]"
        for name, topic in meta.topics.items()
        if wanted is None or name in wanted
        for p in topic.partitions.values()
        if p.leader < 0 or set(p.isrs) != set(p.replicas)
    ]


class BrokerCluster:
    """``size`` Apache Kafka nodes on ``127.0.0.1``, each broker and controller voter.

    Use as a context manager, or call :meth:`start` and :meth:`stop`. Nodes are numbered
    from 1 (their ``node.id``); :meth:`node` returns one to kill, pause or restart, and
    :meth:`heal` brings every node back and waits until all partitions are in sync.

    Args:
        size: the number of nodes (:data:`CLUSTER_SIZE` by default).
        base_dir: each node's data in ``<base_dir>/node-<id>`` (kept across starts); by
            default a temporary folder that :meth:`stop` removes.
        log_dir: each node's log as ``<log_dir>/broker-<id>.log``; by default in its data.
        ports: the nodes' client ports, in node order; free ones by default.
        config: extra or overriding broker properties for every node.
    """

    def __init__(
        self,
        size: int = CLUSTER_SIZE,
        base_dir: Path | None = None,
        log_dir: Path | None = None,
        ports: Sequence[int] | None = None,
        config: Mapping[str, str] | None = None,
    ) -> None:
        if size < 1:
            raise ValueError(f"a cluster has at least one node, not {size}")
        ports = list(ports or [free_port() for _ in range(size)])
        if len(ports) != size:
            raise ValueError(f"{len(ports)} ports given for {size} nodes")
        self._owned_dir = None if base_dir else Path(tempfile.mkdtemp(prefix="headwater-kraft-"))
        base = Path(base_dir) if base_dir else self._owned_dir
        assert base is not None
        ids = range(1, size + 1)
        controller_ports = {node_id: free_port() for node_id in ids}
        voters = ",".join(f"{i}@127.0.0.1:{port}" for i, port in controller_ports.items())
        settings = replication_properties(size) | dict(config or {})
        self.nodes = [
            EmbeddedBroker(
                port=port,
                data_dir=base / f"node-{node_id}",
                log_path=Path(log_dir) / f"broker-{node_id}.log" if log_dir else None,
                config=settings,
                node_id=node_id,
                controller_port=controller_ports[node_id],
                voters=voters,
            )
            for node_id, port in zip(ids, ports, strict=True)
        ]

    @property
    def bootstrap_servers(self) -> str:
        """Every node's ``host:port``: clients find the cluster through any one alive."""
        return ",".join(node.bootstrap_servers for node in self.nodes)

    @property
    def port(self) -> int:
        """The first node's client port."""
        return self.nodes[0].port

    @property
    def data_dir(self) -> Path:
        """The folder holding every node's data (``node-<id>``)."""
        return self.nodes[0].data_dir.parent

    def node(self, node_id: int) -> EmbeddedBroker:
        """Return the node with ``node.id`` ``node_id``."""
        for node in self.nodes:
            if node.node_id == node_id:
                return node
        raise KeyError(f"no node {node_id} in a cluster of {len(self.nodes)}")

    def start(self, timeout: float = START_TIMEOUT_S) -> BrokerCluster:
        """Start every node at once and wait until the cluster accepts ``acks=all`` writes.

        Raises:
            BrokerStartError: not ready within ``timeout`` seconds, or a node exited.
        """
        try:
            # Side by side: formatting a node's data is a JVM start of its own (seconds each).
            with ThreadPoolExecutor(len(self.nodes)) as pool:
                list(pool.map(lambda node: node.start(wait=False), self.nodes))
            wait_ready(self.bootstrap_servers, self.nodes, timeout, replicas=len(self.nodes))
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop every node (controlled shutdown); a temporary data folder is removed.

        All at once: one by one, the last node would wait its whole shutdown timeout for a
        controller quorum that the others took with them.
        """
        with ThreadPoolExecutor(len(self.nodes)) as pool:
            list(pool.map(lambda node: node.stop(), self.nodes))
        if self._owned_dir is not None:
            shutil.rmtree(self._owned_dir, ignore_errors=True)

    def _admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap_servers, "log_level": 0})

    def leader_of(
        self,
        topic: str,
        partition: int = 0,
        timeout: float = 30.0,
        not_on: EmbeddedBroker | None = None,
    ) -> EmbeddedBroker:
        """Return the node leading ``topic``'s ``partition`` (waits while there is none).

        ``not_on``: wait for a leader other than that node (one just killed stays leader
        in the metadata until the controller fences it, a broker session later).

        Raises:
            ClusterError: no leader within ``timeout`` seconds.
        """
        admin = self._admin()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(KafkaException):
                meta = admin.list_topics(topic, timeout=5).topics[topic]
                leader = meta.partitions[partition].leader if meta.partitions else -1
                if leader >= 0 and (not_on is None or leader != not_on.node_id):
                    return self.node(leader)
            time.sleep(0.2)
        raise ClusterError(f"{topic}[{partition}] had no leader after {timeout:.0f}s")

    def active_controller(
        self, timeout: float = 30.0, not_on: EmbeddedBroker | None = None
    ) -> EmbeddedBroker:
        """Return the node leading the controller quorum: the latest epoch a running node won.

        ``not_on``: wait for another node than that one (one just killed).

        Raises:
            ClusterError: no running node leads after ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            won: list[tuple[int, EmbeddedBroker]] = []
            for node in self.nodes:
                with contextlib.suppress(OSError):
                    text = node.log_path.read_text(errors="replace")
                    won += [(int(m[2]), node) for m in _BECAME_LEADER.finditer(text)]
            if won:
                _epoch, leader = max(won, key=lambda pair: pair[0])
                alive = leader.pid is not None and not leader.exited()
                if alive and leader is not not_on:
                    return leader
            time.sleep(0.2)
        raise ClusterError(f"no running node led the controller quorum after {timeout:.0f}s")

    def out_of_sync(self, topics: Iterable[str] | None = None) -> list[str]:
        """Say what is not whole yet: a node not running, or partitions lacking a replica."""
        for node in self.nodes:
            if node.pid is None or node.exited():
                return [f"node {node.node_id} is not running"]
        return out_of_sync([node.bootstrap_servers for node in self.nodes], topics)

    def wait_in_sync(
        self, timeout: float = IN_SYNC_TIMEOUT_S, topics: Iterable[str] | None = None
    ) -> float:
        """Wait until every node is registered and every replica in sync; return the seconds.

        Raises:
            ClusterError: still out of sync after ``timeout`` seconds (names the partitions).
        """
        started = time.monotonic()
        lagging: list[str] = ["no answer"]
        while time.monotonic() - started < timeout:
            with contextlib.suppress(KafkaException):
                lagging = self.out_of_sync(topics)
                if not lagging:
                    return time.monotonic() - started
            time.sleep(0.5)
        raise ClusterError(
            f"not in sync after {timeout:.0f}s: {', '.join(lagging[:10])}"
            + (f" and {len(lagging) - 10} more" if len(lagging) > 10 else "")
        )

    def restart(self, node: EmbeddedBroker, timeout: float = IN_SYNC_TIMEOUT_S) -> float:
        """Start a stopped or killed ``node`` again and wait until all is in sync; seconds."""
        started = time.monotonic()
        node.start(wait=False)
        self.wait_in_sync(timeout)
        if node.exited():
            raise BrokerStartError(node.exit_message())
        return time.monotonic() - started

    def roll(self, timeout: float = IN_SYNC_TIMEOUT_S) -> list[float]:
        """Restart every node in turn, as an upgrade does; return each node's seconds.

        Each node is stopped with SIGTERM (controlled shutdown: its leaderships move
        first) and started again, and the next only once every replica is back in sync.

        Raises:
            ClusterError: a node's replicas not in sync within ``timeout`` seconds.
        """
        took = []
        for node in self.nodes:
            started = time.monotonic()
            node.stop()
            self.restart(node, timeout)
            took.append(time.monotonic() - started)
        return took

    def heal(self, timeout: float = IN_SYNC_TIMEOUT_S) -> None:
        """Resume paused nodes, start stopped ones, wait until every replica is in sync."""
        for node in self.nodes:
            node.resume()
            if node.pid is None or node.exited():
                node.kill()  # forget an exited process before starting it again
                node.start(wait=False)
        self.wait_in_sync(timeout)

    def __enter__(self) -> BrokerCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


#: The embedded Kafka of the dev stack: one broker (the default) or a cluster.
DevKafka = EmbeddedBroker | BrokerCluster


def dev_kafka(brokers: int, port: int | None, log_dir: Path, data_dir: Path | None) -> DevKafka:
    """Return the dev stack's Kafka, not started: one broker, or ``brokers`` nodes.

    One broker logs to ``<log_dir>/broker.log`` and keeps its data in ``data_dir``, as it
    always did; a cluster's nodes log to ``broker-<id>.log``, keep their data in
    ``<data_dir>/node-<id>`` and listen on ``port``, ``port + 1``, ... (``port`` None: free
    ports). ``data_dir`` None: temporary, removed when it stops.
    """
    if brokers == 1:
        return EmbeddedBroker(port=port, log_path=log_dir / "broker.log", data_dir=data_dir)
    ports = [port + i for i in range(brokers)] if port else None
    return BrokerCluster(brokers, base_dir=data_dir, log_dir=log_dir, ports=ports)


def broker_pids(kafka: DevKafka) -> dict[str, int]:
    """The running nodes' process ids: ``broker`` alone, ``broker-<id>`` in a cluster."""
    if isinstance(kafka, EmbeddedBroker):
        return {"broker": kafka.pid} if kafka.pid else {}
    return {f"broker-{node.node_id}": node.pid for node in kafka.nodes if node.pid}
