"""Apache Kafka as pods of the test cluster, standing in for Strimzi's broker pods.

Strimzi's cluster operator cannot run here (our registries do not serve it), so nothing
reconciles a ``Kafka`` resource. What ``headwater chaos kill-broker`` acts on is a pod, so the
stand-in is the closest thing without an operator: a StatefulSet of three KRaft nodes, each
broker and controller (combined, as k8s/kafka.yaml's node pool), with production's
replication (replication factor 3, ``min.insync.replicas=2``, unclean election off: the
settings the dev stack's cluster uses, headwater_dev.devstack.cluster). Its names and labels
are Strimzi's: pods ``headwater-brokers-<node id>`` (cluster ``headwater``, node pool
``brokers``) labelled ``strimzi.io/cluster``, ``strimzi.io/kind=Kafka`` and
``strimzi.io/broker-role=true``; the headless Service ``headwater-kafka-brokers`` and the
bootstrap Service ``headwater-kafka-bootstrap`` (the chart's default
``kafka.bootstrapServers``). A deleted pod is started again under the same name, on the same
volume, as Strimzi's StrimziPodSet does.

Each pod has a PersistentVolumeClaim (a hostPath volume made here: the cluster has no
provisioner), not an emptyDir: Strimzi's brokers keep their disks (k8s/kafka.yaml,
persistent-claim), so a broker pod that comes back recovers its own log and catches up on
what it missed, rather than copying every partition again as a new empty replica would.

What this does not have of Strimzi: the operator itself (no rolling restart it orders, no
certificates, no listeners but PLAINTEXT, no readiness agent: ready here means the client
port answers), and the brokers advertise their pod IPs, not Strimzi's per-pod DNS names, so
that the tests on the host reach them (the host routes to the pod range, but does not
resolve the cluster's names).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from headwater.runtime import jvm
from headwater_dev.devstack.broker import CLUSTER_ID, KAFKA_VERSION, server_properties
from headwater_dev.devstack.cluster import out_of_sync, replication_properties
from scripts.cluster.cluster import Cluster, wait_for
from scripts.images import build, debian_base
from tests.k8s.live import pods, running
from tests.k8s.release import host_path_volume

HERE = Path(__file__).resolve().parent
#: The Strimzi Kafka resource of k8s/kafka.yaml and its node pool: the pods' names.
KAFKA_CLUSTER, NODE_POOL = "headwater", "brokers"
NAME = f"{KAFKA_CLUSTER}-{NODE_POOL}"
NODES_SERVICE = f"{KAFKA_CLUSTER}-kafka-brokers"
BOOTSTRAP_SERVICE = f"{KAFKA_CLUSTER}-kafka-bootstrap"
SIZE = 3
CLIENT_PORT, CONTROLLER_PORT = 9092, 9093
#: What Strimzi puts on its broker pods (headwater_dev.chaos.kube finds them by these).
LABELS = {
    "strimzi.io/cluster": KAFKA_CLUSTER,
    "strimzi.io/kind": "Kafka",
    "strimzi.io/broker-role": "true",
    "strimzi.io/controller-role": "true",
    "strimzi.io/pool-name": NODE_POOL,
}
SELECTOR = ",".join(f"{k}={v}" for k, v in LABELS.items() if k != "strimzi.io/controller-role")
IMAGE = f"localhost/headwater-test/kafka:{KAFKA_VERSION}"
#: Small: three brokers beside the control plane and ingest on 2 shared cores and 24 GiB.
HEAP = "-Xms128m -Xmx256m"
MEMORY = "768Mi"
DATA = Path("/var/lib/kafka")
#: The broker's start: its node id is the pod's ordinal, as Strimzi's pods are numbered.
START = f"""\
set -euf  # no globbing: the class path's * is Java's
id=${{HOSTNAME##*-}}
cp /etc/kafka/server.properties /tmp/server.properties
printf 'node.id=%s\\nadvertised.listeners=PLAINTEXT://%s:{CLIENT_PORT}\\n' "$id" "$POD_IP" \\
  >> /tmp/server.properties
java="java {HEAP} -XX:+UseSerialGC -Djava.awt.headless=true \\
  -Dlog4j2.configurationFile=/etc/kafka/log4j2.properties \\
  -Dsun.net.inetaddr.ttl=5 -Dsun.net.inetaddr.negative.ttl=1 -cp /opt/kafka/libs/*"
if [ ! -f {DATA}/logs/meta.properties ]; then
  $java kafka.tools.StorageTool format -t {CLUSTER_ID} -c /tmp/server.properties
fi
exec $java kafka.Kafka /tmp/server.properties
"""
#: To the container's output (kubectl logs), the broker's chatter at WARN.
LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = out
logger.log.name = kafka.log
logger.log.level = WARN
logger.storage.name = org.apache.kafka.storage
logger.storage.level = WARN
logger.state.name = state.change.logger
logger.state.level = WARN
"""


def build_image() -> str:
    """The brokers' image (cached by podman: seconds when nothing changed); its reference."""
    jars = jvm.jars(jvm.KAFKA_BROKER)[0].parent
    build(IMAGE, HERE / "kafka" / "Dockerfile", {"OS_BASE": debian_base("spark-os")}, jars)
    return IMAGE


def properties(namespace: str) -> str:
    """Every node's server.properties but its node id and advertised address (START adds them)."""
    domain = f"{NODES_SERVICE}.{namespace}.svc.cluster.local"
    voters = ",".join(f"{i}@{NAME}-{i}.{domain}:{CONTROLLER_PORT}" for i in range(SIZE))
    conf = server_properties(DATA, CLIENT_PORT, CONTROLLER_PORT, CLIENT_PORT, voters=voters)
    del conf["node.id"], conf["advertised.listeners"]
    conf["listeners"] = f"PLAINTEXT://0.0.0.0:{CLIENT_PORT},CONTROLLER://0.0.0.0:{CONTROLLER_PORT}"
    conf |= replication_properties(SIZE)
    return "".join(f"{k}={v}\n" for k, v in conf.items())


def volumes(cluster: Cluster, namespace: str) -> list[dict[str, Any]]:
    """One hostPath PersistentVolume per node, bound in advance to its pod's claim."""
    return [
        host_path_volume(
            cluster,
            f"test-kafka-{i}",
            "1Gi",
            "ReadWriteOnce",
            "Retain",
            namespace,
            f"data-{NAME}-{i}",
        )
        for i in range(SIZE)
    ]


def manifests(namespace: str) -> list[dict[str, Any]]:
    """The ConfigMap, both Services and the StatefulSet, in ``namespace``."""
    meta = {"namespace": namespace, "labels": {"strimzi.io/cluster": KAFKA_CLUSTER}}
    ports = [{"name": "clients", "port": CLIENT_PORT}, {"name": "control", "port": CONTROLLER_PORT}]
    restricted = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    container = {
        "name": "kafka",
        "image": IMAGE,
        "imagePullPolicy": "Never",
        "command": ["sh", "/etc/kafka/start.sh"],
        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
        "ports": [{"containerPort": p["port"], "name": p["name"]} for p in ports],
        "readinessProbe": {"tcpSocket": {"port": CLIENT_PORT}, "periodSeconds": 2},
        "resources": {
            "requests": {"cpu": "100m", "memory": MEMORY},
            "limits": {"memory": MEMORY},
        },
        "securityContext": restricted,
        "volumeMounts": [
            {"name": "data", "mountPath": str(DATA)},
            {"name": "config", "mountPath": "/etc/kafka"},
        ],
    }
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": NAME, **meta},
            "data": {
                "server.properties": properties(namespace),
                "log4j2.properties": LOG4J2,
                "start.sh": START,
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": NODES_SERVICE, **meta},
            # Every node is named before it is ready: the quorum forms from these names.
            "spec": {
                "clusterIP": "None",
                "publishNotReadyAddresses": True,
                "selector": LABELS,
                "ports": ports,
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": BOOTSTRAP_SERVICE, **meta},
            "spec": {"selector": LABELS, "ports": ports[:1]},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": NAME, **meta},
            "spec": {
                "serviceName": NODES_SERVICE,
                "replicas": SIZE,
                # All at once: no node is ready before a quorum of them runs.
                "podManagementPolicy": "Parallel",
                "selector": {"matchLabels": LABELS},
                "template": {
                    "metadata": {"labels": LABELS},
                    "spec": {
                        "terminationGracePeriodSeconds": 30,  # Strimzi's default
                        "securityContext": {
                            "runAsNonRoot": True,
                            "runAsUser": 10001,
                            "runAsGroup": 10001,
                            "seccompProfile": {"type": "RuntimeDefault"},
                        },
                        "containers": [container],
                        "volumes": [{"name": "config", "configMap": {"name": NAME}}],
                    },
                },
                "volumeClaimTemplates": [
                    {
                        "metadata": {"name": "data"},
                        "spec": {
                            "accessModes": ["ReadWriteOnce"],
                            "storageClassName": "",
                            "resources": {"requests": {"storage": "1Gi"}},
                        },
                    }
                ],
            },
        },
    ]


@dataclass
class Brokers:
    """The running brokers: where the host and the pods reach them, and their pods."""

    cluster: Cluster
    namespace: str
    #: The bootstrap Service's cluster IP (the host routes to the service range).
    host_bootstrap: str
    #: The chart's default, as with Strimzi.
    cluster_bootstrap: str
    figures: dict[str, float]

    def pods(self) -> dict[str, dict[str, Any]]:
        """The broker pods by name."""
        return {p["metadata"]["name"]: p for p in pods(self.cluster, self.namespace, SELECTOR)}

    def addresses(self) -> list[str]:
        """Every ready broker's ``pod IP:port``."""
        return [
            f"{p['status']['podIP']}:{CLIENT_PORT}"
            for p in self.pods().values()
            if running(p) and all(s.get("ready") for s in p["status"]["containerStatuses"])
        ]

    def leader(self, topic: str, partition: int = 0) -> int:
        """The node id leading ``topic``'s ``partition`` (-1 when none)."""
        admin = AdminClient({"bootstrap.servers": self.host_bootstrap, "log_level": 0})
        try:
            meta = admin.list_topics(topic, timeout=5).topics[topic]
        except KafkaException:
            return -1
        return meta.partitions[partition].leader if meta.partitions else -1

    def wait_in_sync(self, within_s: float) -> None:
        """Wait until every node is ready and every replica of every partition in sync."""

        def in_sync() -> bool:
            addresses = self.addresses()
            try:
                return len(addresses) == SIZE and not out_of_sync(addresses)
            except KafkaException:
                return False

        wait_for("every Kafka broker pod ready and in sync", in_sync, within_s, step_s=2)


@contextmanager
def kafka_pods(cluster: Cluster, namespace: str) -> Iterator[Brokers]:
    """Three broker pods in ``namespace`` (which must exist), ready and in sync; removed after.

    Figures: the image build (cached) and import, and the start to in sync.
    """
    started = time.monotonic()
    build_image()
    figures = {"kafka_image_s": round(time.monotonic() - started, 1)}
    started = time.monotonic()
    cluster.import_podman_image(IMAGE)
    figures["kafka_import_s"] = round(time.monotonic() - started, 1)
    pvs = volumes(cluster, namespace)
    objects = {"apiVersion": "v1", "kind": "List", "items": [*pvs, *manifests(namespace)]}
    try:
        started = time.monotonic()
        cluster.kubectl("apply", "-f", "-", input=json.dumps(objects))
        service = json.loads(
            cluster.kubectl(
                "get", "service", BOOTSTRAP_SERVICE, "-n", namespace, "-o", "json"
            ).stdout
        )
        brokers = Brokers(
            cluster,
            namespace,
            f"{service['spec']['clusterIP']}:{CLIENT_PORT}",
            f"{BOOTSTRAP_SERVICE}:{CLIENT_PORT}",
            figures,
        )
        brokers.wait_in_sync(300)
        figures["kafka_ready_s"] = round(time.monotonic() - started, 1)
        yield brokers
    finally:
        cluster.kubectl(
            "delete",
            "statefulset",
            NAME,
            "-n",
            namespace,
            "--wait=true",
            "--ignore-not-found",
            timeout_s=180,
            check=False,
        )
        wait_for("the broker pods gone", lambda: not pods(cluster, namespace, SELECTOR), 180)
        for claim in range(SIZE):
            cluster.kubectl(
                "delete",
                "pvc",
                f"data-{NAME}-{claim}",
                "-n",
                namespace,
                "--ignore-not-found",
                "--wait=true",
                check=False,
            )
        for pv in pvs:
            cluster.kubectl(
                "delete",
                "pv",
                pv["metadata"]["name"],
                "--ignore-not-found",
                "--wait=true",
                check=False,
            )
