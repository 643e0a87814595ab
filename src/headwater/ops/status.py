"""``headwater status``: is a Kubernetes deployment of Headwater healthy?

Reads the ingest Deployment and its pods, and the enricher's SparkApplication, through
the Kubernetes API (the official Python client; kubeconfig or in-cluster credentials).
The verdict is a pure function of what was read, so it is tested without a cluster.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from headwater.ops.lag import GroupLag

#: SparkApplication states that mean the enricher is doing its job or getting there.
_SPARK_OK = {"RUNNING", "SUBMITTED", "PENDING_RERUN"}
#: Pod restarts above this many are worth a look.
_RESTARTS_ATTENTION = 3


@dataclass
class Assessment:
    """What was found, and what needs attention."""

    checks: list[dict[str, Any]] = field(default_factory=list)

    def add(self, component: str, ok: bool, detail: str) -> None:
        """Record one check."""
        self.checks.append({"component": component, "ok": ok, "detail": detail})

    @property
    def healthy(self) -> bool:
        """True when nothing needs attention."""
        return all(c["ok"] for c in self.checks)


def assess(
    deployments: list[dict[str, Any]],
    pods: list[dict[str, Any]],
    spark_apps: list[dict[str, Any]],
    max_lag: int | None = None,
    lag_threshold: int = 100_000,
    progress: GroupLag | None = None,
    lag_error: str = "",
) -> Assessment:
    """Judge the objects (as the API returns them, as dicts) of one release.

    ``progress`` is the enricher's position per partition (its progress group or its
    checkpoint): one check per partition, and the largest lag as ``max_lag``.
    ``lag_error`` says why it could not be read.
    """
    result = Assessment()
    if not deployments:
        result.add("ingest", False, "no ingest Deployment found for this release")
    for dep in deployments:
        name = dep["metadata"]["name"]
        want = dep.get("spec", {}).get("replicas", 1)
        ready = dep.get("status", {}).get("readyReplicas", 0) or 0
        result.add(
            f"deployment/{name}", ready >= want and want > 0, f"{ready}/{want} replicas ready"
        )
    for pod in pods:
        name = pod["metadata"]["name"]
        statuses = pod.get("status", {}).get("containerStatuses", []) or []
        restarts = sum(s.get("restartCount", 0) for s in statuses)
        ready = bool(statuses) and all(s.get("ready") for s in statuses)
        phase = pod.get("status", {}).get("phase", "Unknown")
        ok = ready and restarts <= _RESTARTS_ATTENTION
        result.add(f"pod/{name}", ok, f"{phase}, ready={ready}, restarts={restarts}")
    if not spark_apps:
        result.add("enricher", False, "no enricher SparkApplication found for this release")
    for app in spark_apps:
        name = app["metadata"]["name"]
        status = app.get("status", {})
        state = status.get("applicationState", {}).get("state", "UNKNOWN")
        error = status.get("applicationState", {}).get("errorMessage", "")
        attempts = status.get("submissionAttempts", 0)
        detail = f"state {state}, submission attempts {attempts}" + (f": {error}" if error else "")
        result.add(f"sparkapplication/{name}", state in _SPARK_OK, detail)
    if lag_error:
        result.add("lag", False, f"cannot read the enricher's offsets: {lag_error}")
    if progress is not None:
        _add_progress(result, progress, lag_threshold)
        if not progress.partitions:
            result.add(
                "lag",
                False,
                f"{progress.group} has no offsets: the enricher has not finished a batch, or "
                "its progress group is off (HEADWATER_ENRICHER_PROGRESS_GROUP); "
                "`headwater lag --checkpoint PATH` reads its checkpoint",
            )
        elif max_lag is None:
            max_lag = progress.max_lag
    if max_lag is not None:
        result.add(
            "lag", max_lag <= lag_threshold, f"max offset lag {max_lag} (threshold {lag_threshold})"
        )
    return result


def _add_progress(result: Assessment, progress: GroupLag, lag_threshold: int) -> None:
    """One check per partition: committed, inside the log, and behind by at most the threshold."""
    for p in progress.partitions:
        where = f"{progress.group}: next offset {'-' if p.committed is None else p.committed}"
        detail = f"{where}, log {p.log_start}..{p.log_end}, lag {'-' if p.lag is None else p.lag}"
        out_of_range = p.committed is not None and not p.log_start <= p.committed <= p.log_end
        if p.committed is None:
            detail += " (never committed)"
        elif out_of_range:
            detail += " (outside the log: retention deleted unread data?)"
        ok = p.lag is not None and p.lag <= lag_threshold and not out_of_range
        result.add(f"lag/{p.topic}[{p.partition}]", ok, detail)


def fetch(
    namespace: str, release: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """Read the release's ingest Deployments, ingest pods and SparkApplications."""
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    api = client.ApiClient()
    ingest = f"app.kubernetes.io/instance={release},app.kubernetes.io/component=ingest"
    enricher = f"app.kubernetes.io/instance={release},app.kubernetes.io/component=enricher"
    # Raw JSON instead of typed models: we only read a few fields, and the typed models
    # reject objects that newer API servers shape differently.
    deployments: Any = client.AppsV1Api(api).list_namespaced_deployment(
        namespace, label_selector=ingest, _preload_content=False
    )
    pods: Any = client.CoreV1Api(api).list_namespaced_pod(
        namespace, label_selector=ingest, _preload_content=False
    )
    spark: Any = client.CustomObjectsApi(api).list_namespaced_custom_object(
        "sparkoperator.k8s.io", "v1beta2", namespace, "sparkapplications", label_selector=enricher
    )
    return (
        json.loads(deployments.data)["items"],
        json.loads(pods.data)["items"],
        list(spark.get("items", [])),
    )
