"""The chart installed as the live tests install it: values, volume, release, figures."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from headwater.ingest.admission.auth import hash_token
from headwater_dev.devstack.supervisor import _publish_demo_master
from scripts.cluster.cluster import Cluster, wait_for
from scripts.cluster.pins import BIN
from tests.k8s.live import broker_for_cluster, pods, publish, running, wait_completed
from tests.support.chart import CHART, K8S

NAMESPACE, RELEASE = "headwater", "hw"
CHECKPOINT_CLAIM = f"{RELEASE}-headwater-enricher-checkpoint"
EXECUTORS = "spark-role=executor"
DRIVER = "spark-role=driver"
#: The issue's target: helm install to the first completion within 3 minutes.
FIRST_COMPLETION_WITHIN_S = 180


@dataclass
class Install:
    """The release and what it was installed with."""

    cluster: Cluster
    host_bootstrap: str
    target: str
    token: str
    values: Path
    figures: dict[str, float] = field(default_factory=dict)
    uninstalled: bool = False

    def helm(self, *args: str, timeout_s: float = 900) -> str:
        """Run the built helm against the cluster; its output."""
        done = subprocess.run(
            [str(BIN / "helm"), f"--kubeconfig={self.cluster.kubeconfig}", "-n", NAMESPACE, *args],
            capture_output=True, text=True, timeout=timeout_s, check=False,
        )  # fmt: skip
        assert done.returncode == 0, f"helm {' '.join(args[:2])}: {done.stderr[-3000:]}"
        return done.stdout


def chart_values(cluster_bootstrap: str, token: str) -> dict[str, Any]:
    return {
        "kafka": {"bootstrapServers": cluster_bootstrap},
        "topics": {"partitions": 3, "replicationFactor": 1, "minInSyncReplicas": 1},
        "ingest": {
            "replicas": 1,
            # The gateway on the host dials the Service's cluster IP.
            "service": {"headless": False},
            "resources": {"requests": {"cpu": "100m", "memory": "192Mi"}},
            "auth": {
                "gateways": [
                    {
                        "id": "k8s-test",
                        "tenant": "dev",
                        "token_sha256": hash_token(token),
                        "devices": ["*"],
                    }
                ]
            },
        },
        "enricher": {
            "runner": "sparkSubmit",
            "startingOffsets": "earliest",
            "shufflePartitions": 3,
            "driver": {"cores": 1, "memory": "1g", "memoryOverhead": "768m"},
            "executor": {"instances": 1, "cores": 1, "memory": "1g", "memoryOverhead": "768m"},
            # Two shared cores: ask the scheduler for less than a whole core each.
            "sparkConf": {
                "spark.kubernetes.driver.request.cores": "200m",
                "spark.kubernetes.executor.request.cores": "200m",
            },
        },
    }


def checkpoint_volume(cluster: Cluster) -> dict[str, Any]:
    """A hostPath PersistentVolume bound in advance to the chart's checkpoint claim."""
    # A new release starts without a checkpoint; "Delete": nothing of it outlives the test.
    return host_path_volume(
        cluster, "checkpoint", "10Gi", "ReadWriteMany", "Delete", NAMESPACE, CHECKPOINT_CLAIM
    )


def host_path_volume(
    cluster: Cluster, folder_name: str, size: str, access: str, reclaim: str,
    namespace: str, claim: str,
) -> dict[str, Any]:  # fmt: skip
    """A hostPath PersistentVolume on an emptied folder, bound in advance to ``claim``.

    The cluster has no storage provisioner. The folder is open to every uid (the Spark pods
    run as 185, the brokers as 10001): hostPath has no fsGroup.
    """
    folder = cluster.run / "volumes" / folder_name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    folder.chmod(0o777)
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": f"headwater-{folder_name}"},
        "spec": {
            "capacity": {"storage": size},
            "accessModes": [access],
            "persistentVolumeReclaimPolicy": reclaim,
            "storageClassName": "",
            "hostPath": {"path": str(folder), "type": "Directory"},
            "claimRef": {"namespace": namespace, "name": claim},
        },
    }


def helm_install(
    cluster: Cluster,
    values: dict[str, Any],
    tmp: Path,
    token: str,
    host_bootstrap: str,
    figures: dict[str, float],
) -> Install:
    """``helm install --wait`` of the chart with ``values``; its target is the ingest Service."""
    path = tmp / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    install = Install(cluster, host_bootstrap, "", token, path, dict(figures))
    started = time.monotonic()
    install.helm("install", RELEASE, str(CHART), "-f", str(path), "--wait", "--timeout=10m")
    install.figures["helm_install_wait_s"] = round(time.monotonic() - started, 1)
    service = json.loads(
        cluster.kubectl(
            "get", "service", f"{RELEASE}-headwater-ingest", "-n", NAMESPACE, "-o", "json"
        ).stdout
    )
    install.target = f"{service['spec']['clusterIP']}:{service['spec']['ports'][0]['port']}"
    return install


@contextmanager
def installed_release(cluster: Cluster, figures: dict[str, float], tmp: Path) -> Iterator[Install]:
    """The chart installed, its first message completed; uninstalled and cleaned up after.

    A broker of its own outside the cluster, an empty checkpoint volume, the namespace of
    k8s/namespace.yaml; then ``helm install --wait``, the devices' master data, one message
    through the gateway library and its completion, timed from the install.
    """
    with broker_for_cluster(tmp / "broker.log", cluster.network) as (host_side, cluster_side):
        token = uuid.uuid4().hex
        cluster.kubectl("apply", "-f", str(K8S / "namespace.yaml"))
        cluster.kubectl("apply", "-f", "-", input=json.dumps(checkpoint_volume(cluster)))
        started = time.monotonic()
        values = chart_values(cluster_side, token)
        install = helm_install(cluster, values, tmp, token, host_side, figures)
        _publish_demo_master(host_side)
        ids = set(publish(install.target, token, tmp / "first.db", 1))
        install.figures["published_s"] = round(time.monotonic() - started, 1)
        wait_for(
            "an executor pod running",
            lambda: any(running(p) for p in pods(cluster, NAMESPACE, EXECUTORS)),
            FIRST_COMPLETION_WITHIN_S * 2,
            step_s=1,
        )
        install.figures["executor_running_s"] = round(time.monotonic() - started, 1)
        outcomes = wait_completed(host_side, ids, FIRST_COMPLETION_WITHIN_S * 2)
        install.figures["first_completion_s"] = round(time.monotonic() - started, 1)
        if set(outcomes.values()) != {"OUTCOME_ENRICHED"}:
            raise RuntimeError(f"the first message was not enriched: {outcomes}")
        print(json.dumps({"chart_live": install.figures}))
        yield install
        print(json.dumps({"chart_live": install.figures}))
        if not install.uninstalled:
            install.helm("uninstall", RELEASE, "--wait", "--timeout=5m")
        cluster.kubectl("delete", "namespace", NAMESPACE, "--wait=true", timeout_s=300)
        cluster.kubectl("delete", "pv", "headwater-checkpoint", "--wait=true")
