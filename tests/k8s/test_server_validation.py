"""Everything we ship, accepted by the real API server: ``kubectl apply --dry-run=server``.

Every object the chart renders (with the real ``helm``) for each values set of tests/helm,
and every manifest in k8s/, into the namespace of k8s/namespace.yaml, which enforces and
warns at the ``restricted`` Pod Security level. The operators' CRDs (tests/k8s/crds) are
installed first, so the API server checks SparkApplication, Kafka, KafkaTopic, KafkaUser,
KafkaNodePool and the monitoring resources against their real schemas; no operator runs.
PodSecurity rejects a Pod outright but only warns about a workload's pod template, so the
warnings count as failures here.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from scripts.cluster.cluster import Cluster, wait_for
from scripts.cluster.pins import BIN, KUBERNETES
from tests.support.chart import CHART, K8S, NAMESPACE, RELEASE, VALUES_SETS

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(600)]

CRDS = Path(__file__).parent / "crds"
#: tests/helm's values sets (the operator-free enricher among them).
VALUES = VALUES_SETS
POD_SECURITY_WARNING = "would violate PodSecurity"


@pytest.fixture(scope="module")
def validating(cluster: Cluster) -> Cluster:
    """The cluster with the CRDs established and our namespace created."""
    # Server-side apply: the SparkApplication CRD (836 KB) is too large for the
    # last-applied annotation of a client-side apply.
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRDS))
    wait_for("the CRDs established", lambda: _established(cluster), 120, step_s=1)
    cluster.kubectl("apply", "-f", str(K8S / "namespace.yaml"))
    return cluster


def _established(cluster: Cluster) -> bool:
    crds = json.loads(cluster.kubectl("get", "crd", "-o", "json").stdout)["items"]
    return len(crds) == len(list(CRDS.glob("*.yaml"))) and all(
        any(c["type"] == "Established" and c["status"] == "True" for c in conditions)
        for conditions in (crd.get("status", {}).get("conditions") or [] for crd in crds)
    )


def _dry_run(cluster: Cluster, manifest: str) -> subprocess.CompletedProcess[str]:
    return cluster.kubectl(
        "apply", "--dry-run=server", "-n", NAMESPACE, "-f", "-", input=manifest, check=False
    )


def _kinds(manifest: str) -> list[str]:
    return [f"{d['kind']}/{d['metadata']['name']}" for d in yaml.safe_load_all(manifest) if d]


def helm_template(values: dict, tmp_path: Path) -> str:  # type: ignore[type-arg]
    """The chart rendered by the real helm as release ``hw`` (hooks and tests included).

    ``--kube-version``: the cluster's, which ``helm template`` cannot ask (no cluster).
    """
    values_file = tmp_path / "values.yaml"
    values_file.write_text(json.dumps(values))
    return subprocess.run(
        [str(BIN / "helm"), "template", RELEASE, str(CHART), "-n", NAMESPACE,
         f"--kube-version={KUBERNETES}", "-f", str(values_file)],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip


@pytest.mark.parametrize("values_set", list(VALUES))
def test_the_chart_is_accepted_for_each_values_set(
    validating: Cluster, values_set: str, tmp_path: Path
):
    manifest = helm_template(VALUES[values_set], tmp_path)
    kinds = _kinds(manifest)
    done = _dry_run(validating, manifest)
    assert done.returncode == 0, done.stderr
    assert POD_SECURITY_WARNING not in done.stderr, done.stderr
    accepted = [line for line in done.stdout.splitlines() if line.endswith("(server dry run)")]
    assert len(accepted) == len(kinds), (kinds, done.stdout)


def _manifests() -> list[Path]:
    """The files of k8s/ that hold objects (the others are values files)."""
    return [
        path
        for path in sorted(K8S.glob("*.yaml"))
        if all("apiVersion" in d and "kind" in d for d in yaml.safe_load_all(path.read_text()) if d)
    ]


@pytest.mark.parametrize("path", _manifests(), ids=lambda p: p.name)
def test_every_manifest_in_k8s_is_accepted(validating: Cluster, path: Path):
    done = _dry_run(validating, path.read_text())
    assert done.returncode == 0, done.stderr
    assert POD_SECURITY_WARNING not in done.stderr, done.stderr


def test_the_k8s_folder_holds_manifests():
    names = {p.name for p in _manifests()}
    assert {"namespace.yaml", "kafka.yaml", "kafka-topics.yaml", "kafka-user.yaml"} <= names


def test_a_privileged_pod_is_refused_in_our_namespace(validating: Cluster):
    """The restricted level is enforced: the check above can fail."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "privileged"},
        "spec": {
            "containers": [{"name": "main", "image": "x", "securityContext": {"privileged": True}}]
        },
    }
    done = _dry_run(validating, json.dumps(pod))
    assert done.returncode != 0
    assert "violates PodSecurity" in done.stderr


def test_a_deployment_below_restricted_is_warned_about(validating: Cluster):
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "loose"},
        "spec": {
            "selector": {"matchLabels": {"app": "loose"}},
            "template": {
                "metadata": {"labels": {"app": "loose"}},
                "spec": {"containers": [{"name": "main", "image": "x"}]},
            },
        },
    }
    done = _dry_run(validating, json.dumps(deployment))
    assert POD_SECURITY_WARNING in done.stderr


def test_a_sparkapplication_is_checked_against_its_crd(validating: Cluster):
    """The CRD's schema is enforced: a wrongly typed field is refused."""
    app = {
        "apiVersion": "sparkoperator.k8s.io/v1beta2",
        "kind": "SparkApplication",
        "metadata": {"name": "typo"},
        "spec": {
            "type": "Python",
            "mode": "cluster",
            "sparkVersion": "4.2.0",
            "mainApplicationFile": "local:///x.py",
            "driver": {"cores": "many"},
            "executor": {"instances": 1},
        },
    }
    done = _dry_run(validating, json.dumps(app))
    assert done.returncode != 0
    assert "spec.driver.cores" in done.stderr
