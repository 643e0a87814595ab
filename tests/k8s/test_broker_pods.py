"""A Kafka broker pod deleted by ``headwater chaos kill-broker`` under load: nothing lost.

The brokers are three KRaft pods of a StatefulSet that **stands in for Strimzi's broker pods**
(tests/k8s/brokers.py): Strimzi's operator cannot run here, so no operator does; the pods carry
Strimzi's names and labels, and the StatefulSet starts a deleted pod again under the same name,
on the same volume, as Strimzi's StrimziPodSet does. The chart is installed with the topics as
in production (3 partitions, replication factor 3, ``min.insync.replicas=2``) and ingest on
Strimzi's bootstrap Service; without the enricher (the fault is Kafka's, and Spark's driver and
executor would add 2-3 GiB to the module). A gateway on the host publishes through the gateway
library from three devices, one per partition; ``chaos kill-broker --leader-of <telemetry
topic> --execute`` deletes the pod leading partition 0: with its own grace period, and with
``--grace-seconds 0``. Either way kubelet stops the container with SIGTERM first (its shortest
grace is 2 s), so the broker makes a controlled shutdown and hands its leaderships over: a
drained node or a pod rescheduled, never a machine lost at once.

What it proves: chaos finds Strimzi-labelled broker pods and, through Kafka's metadata, the one
leading a partition; that pod's partitions get a new leader and the pod comes back under its
name and catches up; every acknowledged message is in Kafka at the partition and offset its
OK named (0 lost); ingest logs that the leaders moved. Figures are printed and kept in
docs/benchmarks.md. What it does not prove: anything of Strimzi's operator itself (its restarts,
rolling updates, readiness agent, TLS listeners and per-pod DNS names), nor a broker lost without
a shutdown (SIGKILL: tests/ingest/test_cluster_faults.py, marker ``cluster``, on loopback).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from headwater import record_headers as rh
from headwater.topics import INGEST_TOPICS
from headwater_dev.bench.faults.ledger import silence_around
from headwater_dev.devstack.readback import read_topic
from scripts.cluster.cluster import Cluster, wait_for
from tests.k8s.brokers import KAFKA_CLUSTER, SIZE, Brokers, kafka_pods
from tests.k8s.live import Publisher
from tests.k8s.release import NAMESPACE, RELEASE, Install, chart_values, helm_install
from tests.support.chart import K8S
from tests.support.ingest_ledger import devices_over

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(1200)]
HEADWATER = str(Path(sys.executable).parent / "headwater")
TOPIC = INGEST_TOPICS["telemetry"]
PARTITIONS = 3
#: The load: BATCH readings spooled every PAUSE_S, COUNT in all (about 40 s of traffic).
COUNT, BATCH, PAUSE_S = 8000, 20, 0.1
#: Bounds on a loaded 2-core machine: a new leader, the pod back, every replica in sync.
ELECTION_WITHIN_S, BACK_WITHIN_S, IN_SYNC_WITHIN_S = 60, 180, 300
LEADERS_MOVED = "Kafka partition leaders moved"


@pytest.fixture(scope="module")
def on_broker_pods(
    cluster: Cluster, images: dict[str, float], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Install, Brokers]]:
    """The broker pods in the release's namespace, and the chart (ingest only) on them."""
    cluster.kubectl("apply", "-f", str(K8S / "namespace.yaml"))
    try:
        with kafka_pods(cluster, NAMESPACE) as brokers:
            token = uuid.uuid4().hex
            values = chart_values(brokers.cluster_bootstrap, token)
            values["topics"] = {"partitions": PARTITIONS, "replicationFactor": SIZE,
                                "minInSyncReplicas": 2}  # fmt: skip
            values["enricher"] = {"enabled": False}
            tmp = tmp_path_factory.mktemp("brokers")
            figures = images | brokers.figures
            install = helm_install(cluster, values, tmp, token, brokers.host_bootstrap, figures)
            try:
                yield install, brokers
            finally:
                print(json.dumps({"broker_pods": install.figures}))
                install.helm("uninstall", RELEASE, "--wait", "--timeout=5m")
    finally:
        cluster.kubectl("delete", "namespace", NAMESPACE, "--wait=true", timeout_s=300)


def _leader_other_than(brokers: Brokers, node: int) -> int:
    leader = -1

    def moved() -> bool:
        nonlocal leader
        leader = brokers.leader(TOPIC)
        return leader >= 0 and leader != node

    wait_for(f"a leader of {TOPIC}[0] other than node {node}", moved, ELECTION_WITHIN_S, 0.2)
    return leader


def _back_under_its_name(brokers: Brokers, name: str, old_uid: str) -> None:
    def back() -> bool:
        pod = brokers.pods().get(name)
        if pod is None or pod["metadata"]["uid"] == old_uid:
            return False
        statuses = pod["status"].get("containerStatuses", [])
        return bool(statuses) and all(s.get("ready") for s in statuses)

    wait_for(f"{name} back and ready", back, BACK_WITHIN_S, step_s=0.5)


def _leader_moves_logged(cluster: Cluster) -> int:
    """How many times ingest has logged that partition leaders moved."""
    ingest = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component=ingest"
    logs = cluster.kubectl("logs", "-n", NAMESPACE, "-l", ingest, "--tail=-1").stdout
    return logs.count(LEADERS_MOVED)


@pytest.mark.parametrize("grace", [None, 0], ids=["own-grace", "grace-0"])
def test_a_broker_pod_deleted_by_chaos_loses_no_acknowledged_message(
    on_broker_pods: tuple[Install, Brokers], tmp_path: Path, grace: int | None
):
    """With the pod's own grace period (30 s) and with ``--grace-seconds 0``."""
    install, brokers = on_broker_pods
    cluster = install.cluster
    moves_logged = _leader_moves_logged(cluster)
    devices = devices_over("k8s-broker", PARTITIONS, PARTITIONS)
    publisher = Publisher(install.target, install.token, tmp_path / "spool.db", COUNT,
                          PAUSE_S, batch=BATCH, devices=devices)  # fmt: skip
    began = time.monotonic()
    publisher.start()
    wait_for(
        f"OKs on {TOPIC}[0]",
        lambda: any(r.status == "delivered" and r.partition == 0 for _, r in publisher.timed),
        60,
    )
    leader = brokers.leader(TOPIC)
    victim = f"{KAFKA_CLUSTER}-brokers-{leader}"
    old_uid = brokers.pods()[victim]["metadata"]["uid"]

    chaos = subprocess.run(
        [HEADWATER, "chaos", "kill-broker", "--namespace", NAMESPACE, "--release", RELEASE,
         "--kubeconfig", str(cluster.kubeconfig), "--leader-of", TOPIC,
         "--bootstrap-servers", brokers.host_bootstrap, "--execute",
         *([] if grace is None else ["--grace-seconds", str(grace)])],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    deleted_at = time.monotonic()
    assert chaos.returncode == 0, chaos.stdout + chaos.stderr
    assert f"doing: delete Strimzi broker pod {victim}, leader of {TOPIC}[0]" in chaos.stdout
    assert re.search(rf"^deleted Strimzi broker pod {victim} \(uid {old_uid}\)", chaos.stdout, re.M)

    new_leader = _leader_other_than(brokers, leader)
    elected_s = time.monotonic() - deleted_at
    _back_under_its_name(brokers, victim, old_uid)
    back_s = time.monotonic() - deleted_at
    brokers.wait_in_sync(IN_SYNC_WITHIN_S)
    in_sync_s = time.monotonic() - deleted_at

    acknowledged = publisher.result(within_s=600)
    ended = time.monotonic()
    assert len(acknowledged) == COUNT, f"{COUNT - len(acknowledged)} never acknowledged"
    # Every OK names where its message is: that record is there, with that message id.
    named = {
        (r.partition, r.offset): r.message_id for _, r in publisher.timed if r.status == "delivered"
    }
    found = {
        (record.partition(), record.offset()): dict(record.headers() or []).get(rh.MESSAGE_ID)
        for record in read_topic(brokers.host_bootstrap, TOPIC, timeout_s=120)
    }
    lost = [i for at, i in named.items() if found.get(at) != i.encode()]
    assert not lost, f"{len(lost)} acknowledged messages not where their OK said: {lost[:5]}"

    oks = sorted(t for t, r in publisher.timed if r.status == "delivered" and r.partition == 0)
    gap_from, gap_to = silence_around(oks, deleted_at, ended)
    retried = sum(1 for _, r in publisher.timed if r.status == "retry")
    figures = {
        "grace_s": grace,
        "deleted_pod": victim,
        "new_leader": new_leader,
        "new_leader_after_s": round(elected_s, 1),
        "no_ok_on_partition_0_s": round(gap_to - gap_from, 1),
        "pod_back_ready_after_s": round(back_s, 1),
        "in_sync_after_s": round(in_sync_s, 1),
        "acknowledged": len(acknowledged),
        "lost": len(lost),
        "retries": retried,
        "load_msg_per_s": round(COUNT / (ended - began), 1),
    }
    print(json.dumps({"broker_pod_deleted": figures}))
    wait_for(
        f"ingest's log line {LEADERS_MOVED!r} again",
        lambda: _leader_moves_logged(cluster) > moves_logged,
        60,
        step_s=2,
    )
