"""Faults on Kubernetes: delete one Strimzi broker pod or one Spark executor pod.

A deleted pod is what a lost machine, a drained node or a preempted executor looks like to
the workloads: Strimzi's StrimziPodSet starts the broker again under the same name, the
enricher's Spark driver asks for a new executor. Pods are found by the labels their owners
put on them: Strimzi's on the pods of a Kafka cluster's brokers (``strimzi.io/cluster``,
``strimzi.io/kind=Kafka``, ``strimzi.io/broker-role=true``) and Spark's on executors
(``spark-role=executor``) with the chart's (``app.kubernetes.io/instance=<release>``,
``app.kubernetes.io/component=enricher``). Only running pods not already being deleted are
candidates. The production check (production.py) is made before any pod is looked at.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from headwater_dev.chaos.devstack import ChaosError


@dataclass(frozen=True)
class Role:
    """Which pods a fault picks from, and what to watch after one is deleted."""

    #: What the pod is, for people ("Strimzi broker pod").
    what: str
    selector: str
    #: Which candidate is deleted when none is named: the last by name, else the first.
    pick_last: bool
    watch: tuple[str, ...]


def broker_role(namespace: str, kafka_cluster: str, release: str) -> Role:
    """The broker pods of the Strimzi Kafka cluster ``kafka_cluster`` (k8s/kafka.yaml)."""
    selector = (
        f"strimzi.io/cluster={kafka_cluster},strimzi.io/kind=Kafka,strimzi.io/broker-role=true"
    )
    ingest = f"app.kubernetes.io/instance={release},app.kubernetes.io/component=ingest"
    return Role(
        "Strimzi broker pod",
        selector,
        pick_last=True,
        watch=(
            f"kubectl -n {namespace} get pods -l {selector} -w   (Strimzi starts it again, "
            "same name)",
            f"kubectl -n {namespace} logs -l {ingest} -f --tail 20   ('Kafka partition leaders "
            "moved', retries; never an OK without 2 in-sync copies)",
            "headwater_ingest_kafka_under_replicated_partitions   (back to 0 once the broker "
            "caught up; alert HeadwaterKafkaUnderReplicated)",
            "docs/operations.md, runbook 'A broker was lost'",
        ),
    )


def executor_role(namespace: str, release: str) -> Role:
    """The Spark executor pods of the release's enricher."""
    chart = f"app.kubernetes.io/instance={release},app.kubernetes.io/component=enricher"
    selector = f"spark-role=executor,{chart}"
    return Role(
        "Spark executor pod",
        selector,
        pick_last=False,
        watch=(
            f"kubectl -n {namespace} get pods -l {selector} -w   (the driver asks for a new "
            "executor)",
            f"kubectl -n {namespace} logs -l spark-role=driver,{chart} -f --tail 20   ('Lost "
            "executor', its tasks retried elsewhere)",
            f"headwater status --namespace {namespace} --release {release}   (the query "
            "running, its lag back down)",
            "docs/operations.md, runbook 'An executor or the driver was lost'",
        ),
    )


class Kube:
    """A namespace's pods through one kube context (``connect`` makes one)."""

    def __init__(self, core: Any, namespace: str, context: str, cluster: str) -> None:
        self._core = core
        self.namespace = namespace
        #: The kube context's name and its cluster's, for the production check.
        self.context, self.cluster = context, cluster

    @classmethod
    def connect(cls, namespace: str, context: str | None, kubeconfig: str | None) -> Kube:
        """Through ``context`` of ``kubeconfig`` (default: the current one of $KUBECONFIG)."""
        from kubernetes import client, config

        try:
            contexts, current = config.list_kube_config_contexts(config_file=kubeconfig)
            name = context or current["name"]
            chosen = next((c for c in contexts if c["name"] == name), None)
            if chosen is None:
                raise ChaosError(f"no kube context {name!r} in the kubeconfig")
            api = config.new_client_from_config(config_file=kubeconfig, context=name)
        except (config.ConfigException, OSError) as exc:
            raise ChaosError(f"cannot use the kubeconfig: {exc}") from None
        cluster = str(chosen.get("context", {}).get("cluster", ""))
        return cls(client.CoreV1Api(api), namespace, name, cluster)

    def namespace_labels(self) -> dict[str, str] | None:
        """The namespace's labels; None when we may not read them."""
        from kubernetes.client import ApiException

        try:
            namespace = _json(self._core.read_namespace(self.namespace, _preload_content=False))
        except ApiException as exc:
            if exc.status == 404:
                raise ChaosError(f"no namespace {self.namespace!r} in {self.context!r}") from None
            if exc.status in (401, 403):
                return None
            raise
        return dict(namespace["metadata"].get("labels") or {})

    def running(self, role: Role) -> list[str]:
        """The names of the role's pods that run and are not being deleted, sorted."""
        pods = _json(
            self._core.list_namespaced_pod(
                self.namespace, label_selector=role.selector, _preload_content=False
            )
        )
        return sorted(
            p["metadata"]["name"]
            for p in pods["items"]
            if p["status"].get("phase") == "Running" and "deletionTimestamp" not in p["metadata"]
        )

    def delete(self, name: str, grace_seconds: int | None) -> str:
        """Delete pod ``name`` (its own grace period unless given); return its uid."""
        from kubernetes.client import V1DeleteOptions

        body = V1DeleteOptions(grace_period_seconds=grace_seconds)  # None: left out
        pod = _json(
            self._core.delete_namespaced_pod(
                name, self.namespace, body=body, _preload_content=False
            )
        )
        return str(pod["metadata"]["uid"])


def _json(response: Any) -> Any:
    """The response's JSON.

    Raw, not the typed models: a few fields are read, and the typed models reject objects
    that newer API servers shape differently (as in headwater.ops.status).
    """
    return json.loads(response.data)


def node_pod(role: Role, running: list[str], node_id: int, namespace: str) -> str:
    """The running pod of ``role`` that is Kafka node ``node_id``.

    Its name ends in ``-<node id>``: Strimzi names a broker pod ``<cluster>-<node pool>-<node
    id>``, and so does a StatefulSet whose ordinals are the node ids.
    """
    pods = [name for name in running if name.rsplit("-", 1)[-1] == str(node_id)]
    if len(pods) != 1:
        raise ChaosError(
            f"no single running {role.what} for Kafka node {node_id} in namespace "
            f"{namespace!r} (running: {running})"
        )
    return pods[0]


def choose(role: Role, running: list[str], wanted: str | None, namespace: str) -> str:
    """The pod to delete: ``wanted`` if it is a running one of the role, else by the role's rule."""
    if not running:
        raise ChaosError(
            f"no running {role.what} in namespace {namespace!r} (label selector {role.selector})"
        )
    if wanted is None:
        return running[-1] if role.pick_last else running[0]
    if wanted not in running:
        raise ChaosError(f"{wanted!r} is not a running {role.what}: those are {running}")
    return wanted
