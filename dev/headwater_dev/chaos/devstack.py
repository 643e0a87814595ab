"""Faults against a background dev stack (``headwater devstack up --brokers 3``).

The stack's state file names each Kafka node's process (``broker-<id>``) and port; its
supervisor starts a node that exits again, as Kubernetes restarts a Strimzi broker pod.
So a kill here is a lost broker that comes back, a pause a frozen one, and a roll an
upgrade: each node stopped with SIGTERM, the next only once every replica is back in sync.
Executor faults need ``--spark-workers 2``: the file names each Spark daemon
(``spark-worker-<n>``), and a worker's executors are its child processes.
Every action is planned first and printed; it is carried out only when ``execute``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from headwater.errors import HeadwaterError
from headwater_dev.devstack import status_file
from headwater_dev.devstack.cluster import out_of_sync
from headwater_dev.devstack.spark_cluster import DAEMON_MARKER, executors_of


class ChaosError(HeadwaterError, RuntimeError):
    """The fault cannot be provoked here; the message says why and what to do."""


@dataclass(frozen=True)
class Node:
    """One Kafka node of the stack: its ``node.id``, process and client address."""

    node_id: int
    pid: int
    address: str


def running_stack(workdir: Path, flags: str) -> status_file.StackState:
    """Return the state of the stack running in ``workdir``.

    Raises:
        ChaosError: none runs there (the message says how to start one with ``flags``).
    """
    state = status_file.read(workdir.resolve())
    if state is None or not status_file.alive(state.supervisor_pid):
        raise ChaosError(
            f"no dev stack runs in {workdir}: start one with `headwater devstack up {flags}`"
        )
    return state


def spark_executors(workdir: Path) -> tuple[status_file.StackState, dict[int, list[int]]]:
    """Return the running stack in ``workdir`` and its executor JVMs, by worker number.

    Raises:
        ChaosError: no stack runs there, or its enricher runs in Spark's local mode.
    """
    state = running_stack(workdir, "--spark-workers 2")
    workers = {
        int(name.rsplit("-", 1)[1]): pid
        for name, pid in state.pids.items()
        if name.startswith("spark-worker-") and status_file.runs(pid, DAEMON_MARKER)
    }
    if not workers:
        raise ChaosError(
            f"the dev stack in {workdir} runs no Spark worker (the enricher in Spark's local "
            "mode has no executor to lose). Restart it with `headwater devstack down` and "
            "`headwater devstack up --spark-workers 2`"
        )
    return state, {n: executors_of(pid) for n, pid in sorted(workers.items())}


def cluster_nodes(workdir: Path) -> tuple[status_file.StackState, list[Node]]:
    """Return the running stack in ``workdir`` and its Kafka nodes.

    Raises:
        ChaosError: no stack runs there, or it runs one broker (nothing could take over).
    """
    state = running_stack(workdir, "--brokers 3")
    if state.brokers < 3:
        raise ChaosError(
            f"the dev stack in {workdir} runs {state.brokers} broker: a broker fault there is "
            "an outage, not a failover. Restart it with `headwater devstack down` and "
            "`headwater devstack up --brokers 3`"
        )
    first = state.ports["kafka"]
    nodes = [
        Node(i, state.pids.get(f"broker-{i}", 0), f"127.0.0.1:{first + i - 1}")
        for i in range(1, state.brokers + 1)
    ]
    return state, nodes


def pick(nodes: list[Node], bootstrap: str, leader_of: str | None) -> Node:
    """The node leading ``leader_of``'s partition 0, else the highest-numbered node."""
    if leader_of is None:
        return nodes[-1]
    leader = leader_id(bootstrap, leader_of, "the stack's cluster")
    return next(n for n in nodes if n.node_id == leader)


def leader_id(bootstrap: str, topic_name: str, where: str) -> int:
    """The node id of the broker leading ``topic_name``'s partition 0 in the Kafka at ``bootstrap``.

    ``where`` names that Kafka in the error (no such topic, or no answer within 10 s).
    """
    try:
        meta = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0}).list_topics(
            topic_name, timeout=10
        )
    except KafkaException as exc:
        raise ChaosError(f"no answer from {where} ({bootstrap}): {exc}") from None
    topic = meta.topics.get(topic_name)
    if topic is None or topic.error is not None or not topic.partitions:
        raise ChaosError(f"no topic {topic_name!r} on {where}")
    leader = int(topic.partitions[0].leader)
    if leader < 0:
        raise ChaosError(f"{topic_name}[0] has no leader now on {where}: nothing to kill")
    return leader


def watch_hints(state: status_file.StackState, node: Node) -> list[str]:
    """What to look at while the fault lasts."""
    workdir = Path(state.workdir)
    return [
        f"headwater devstack status --workdir {workdir}   (each node: up, exited)",
        f"{workdir / 'ingest.log'}   (the Kafka client's warnings: a broker down, retries)",
        f"{workdir / f'broker-{node.node_id}.log'}   (the node's own log)",
        f"{state.metrics_url('ingest')}   (headwater_ingest_messages_total by code: "
        "UNAVAILABLE and DEADLINE_EXCEEDED while partitions move)",
    ]


def signal_node(node: Node, sig: signal.Signals) -> None:
    """Send ``sig`` to the node's process (checked to be a Kafka JVM: pids are reused)."""
    if not status_file.runs(node.pid, "kafka.Kafka"):
        raise ChaosError(f"Kafka node {node.node_id} (pid {node.pid}) is not running")
    os.kill(node.pid, sig)


def wait_replaced_and_in_sync(workdir: Path, node: Node, timeout: float) -> float:
    """Wait until the supervisor runs the node again and every replica is in sync."""
    started = time.monotonic()
    lagging = ["not started again yet"]
    while time.monotonic() - started < timeout:
        _, nodes = cluster_nodes(workdir)
        now = next(n for n in nodes if n.node_id == node.node_id)
        if now.pid != node.pid and status_file.runs(now.pid, "kafka.Kafka"):
            with contextlib.suppress(KafkaException):
                lagging = out_of_sync([n.address for n in nodes])
                if not lagging:
                    return time.monotonic() - started
        time.sleep(1.0)
    raise ChaosError(
        f"Kafka node {node.node_id} not back in sync after {timeout:.0f}s: {lagging[:5]}"
    )
