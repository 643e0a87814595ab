"""The installed chart changed and disturbed: ``helm upgrade`` (ingest rolls), ``helm
rollback``, the ingest pod deleted under load, an executor pod deleted mid-stream (by
``headwater chaos kill-executor``, whose dry run and production refusal are checked first), and
``helm uninstall`` leaving only what docs/deploy.md says it keeps. Each disturbance comes
while a gateway on the host publishes; every acknowledged message must get a terminal
completion (0 acknowledged lost, 0 without a completion).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from scripts.cluster.cluster import wait_for
from tests.k8s.live import Publisher, pods, running, wait_completed
from tests.k8s.release import CHECKPOINT_CLAIM, EXECUTORS, NAMESPACE, RELEASE, Install
from tests.support.chart import CHART

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(2400)]
HEADWATER = str(Path(sys.executable).parent / "headwater")


def _ingest_pods(installed: Install) -> list[dict[str, Any]]:
    return pods(installed.cluster, NAMESPACE, "app.kubernetes.io/component=ingest")


def _delivered_and_completed(installed: Install, publisher: Publisher, count: int) -> None:
    """Every message acknowledged, and every acknowledged one has a terminal completion."""
    acknowledged = publisher.result(within_s=600)
    assert len(acknowledged) == count, f"{count - len(acknowledged)} never acknowledged"
    outcomes = wait_completed(installed.host_bootstrap, set(acknowledged), 600)
    assert set(outcomes.values()) == {"OUTCOME_ENRICHED"}


def _start_publishing(installed: Install, spool: Path, count: int) -> Publisher:
    publisher = Publisher(installed.target, installed.token, spool, count, pause_s=0.25)
    publisher.start()
    time.sleep(3)  # under load when the disturbance comes
    return publisher


def test_upgrade_rolls_ingest_without_losing_an_acknowledged_message(
    installed: Install, tmp_path: Path
):
    before = {p["metadata"]["name"] for p in _ingest_pods(installed)}
    publisher = _start_publishing(installed, tmp_path / "spool.db", 200)
    started = time.monotonic()
    installed.helm(
        "upgrade", RELEASE, str(CHART), "-f", str(installed.values),
        "--set", "ingest.logLevel=DEBUG", "--wait", "--timeout=10m",
    )  # fmt: skip
    installed.figures["helm_upgrade_s"] = round(time.monotonic() - started, 1)
    after = {
        p["metadata"]["name"]
        for p in _ingest_pods(installed)
        if running(p) and "deletionTimestamp" not in p["metadata"]  # not the draining one
    }
    assert after and not after & before, "ingest did not roll"
    _delivered_and_completed(installed, publisher, 200)


def test_rollback_restores_the_previous_settings(installed: Install):
    installed.helm("rollback", RELEASE, "1", "--wait", "--timeout=10m")
    config = json.loads(
        installed.cluster.kubectl(
            "get", "configmap", f"{RELEASE}-headwater-ingest", "-n", NAMESPACE, "-o", "json"
        ).stdout
    )
    assert config["data"]["HEADWATER_LOG_LEVEL"] == "INFO"
    history = installed.helm("history", RELEASE, "-o", "json")
    assert [r["revision"] for r in json.loads(history)] == [1, 2, 3]


def test_deleting_the_ingest_pod_under_load_loses_nothing(installed: Install, tmp_path: Path):
    publisher = _start_publishing(installed, tmp_path / "spool.db", 200)
    for pod in _ingest_pods(installed):
        installed.cluster.kubectl("delete", "pod", pod["metadata"]["name"], "-n", NAMESPACE,
                                  "--wait=false")  # fmt: skip
    _delivered_and_completed(installed, publisher, 200)


def _chaos(
    installed: Install, *args: str, kubeconfig: Path | None = None, fault: str = "kill-executor"
) -> subprocess.CompletedProcess[str]:
    """``headwater chaos FAULT`` on the release, through the cluster's kubeconfig."""
    return subprocess.run(
        [
            *(HEADWATER, "chaos", fault, "--namespace", NAMESPACE, "--release", RELEASE),
            *("--kubeconfig", str(kubeconfig or installed.cluster.kubeconfig), *args),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _executor_uids(installed: Install) -> dict[str, str]:
    return {
        p["metadata"]["name"]: p["metadata"]["uid"]
        for p in pods(installed.cluster, NAMESPACE, EXECUTORS)
    }


def test_chaos_dry_run_deletes_nothing_and_production_is_refused(
    installed: Install, tmp_path: Path
):
    before = _executor_uids(installed)
    first = min(p["metadata"]["name"] for p in pods(installed.cluster, NAMESPACE, EXECUTORS)
                if running(p))  # fmt: skip
    dry = _chaos(installed)
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert f"dry run, would do: delete Spark executor pod {first} in {NAMESPACE}" in dry.stdout
    assert "nothing done: add --execute" in dry.stdout
    # No Strimzi here (the tests' Kafka is outside the cluster): no broker pod to delete.
    brokers = _chaos(installed, "--execute", fault="kill-broker")
    assert brokers.returncode == 2, brokers.stdout + brokers.stderr
    assert brokers.stdout.startswith(
        f"no running Strimzi broker pod in namespace {NAMESPACE!r} (label selector "
        "strimzi.io/cluster=headwater,strimzi.io/kind=Kafka,strimzi.io/broker-role=true)"
    )

    # The namespace labelled production: refused in one line, even with --execute.
    labelled = "headwater.dev/environment"
    installed.cluster.kubectl("label", "namespace", NAMESPACE, f"{labelled}=production")
    try:
        refused = _chaos(installed, "--execute")
    finally:
        installed.cluster.kubectl("label", "namespace", NAMESPACE, f"{labelled}-")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert refused.stdout == (
        f"refused: namespace {NAMESPACE!r} is labelled {labelled}=production; chaos is for dev "
        "and staging (--i-know-this-is-production to act anyway)\n"
    )
    # A kube context named as production: refused whatever the namespace says.
    config = yaml.safe_load(installed.cluster.kubeconfig.read_text())
    config["contexts"][0]["name"] = config["current-context"] = "eu-prod-1"
    prod = tmp_path / "prod.kubeconfig"
    prod.write_text(yaml.safe_dump(config))
    by_context = _chaos(installed, "--execute", kubeconfig=prod)
    assert by_context.returncode == 2, by_context.stdout + by_context.stderr
    assert by_context.stdout.startswith("refused: the kube context 'eu-prod-1' is named as prod")
    assert _executor_uids(installed) == before  # nothing was deleted


def test_deleting_an_executor_mid_stream_loses_nothing(installed: Install, tmp_path: Path):
    publisher = _start_publishing(installed, tmp_path / "spool.db", 200)
    killed = _chaos(installed, "--execute")
    assert killed.returncode == 0, killed.stdout + killed.stderr
    (victim,) = re.findall(r"^deleted Spark executor pod (\S+) \(uid", killed.stdout, re.M)
    victims = {victim}
    assert "watch:" in killed.stdout and "spark-role=executor" in killed.stdout
    wait_for(
        "Spark asks for a new executor",
        lambda: any(
            running(p) and p["metadata"]["name"] not in victims
            for p in pods(installed.cluster, NAMESPACE, EXECUTORS)
        ),
        300,
        step_s=2,
    )
    _delivered_and_completed(installed, publisher, 200)


def test_uninstall_leaves_only_the_kept_claim(installed: Install):
    """docs/deploy.md: topics (in Kafka) and the checkpoint PVC are kept; nothing else."""
    installed.helm("uninstall", RELEASE, "--wait", "--timeout=5m")
    installed.uninstalled = True
    cluster = installed.cluster
    wait_for("the release's pods gone", lambda: not pods(cluster, NAMESPACE, ""), 300, step_s=2)
    kinds = "deployments,jobs,services,configmaps,secrets,serviceaccounts,roles,rolebindings,pvc"
    left = json.loads(cluster.kubectl("get", kinds, "-n", NAMESPACE, "-o", "json").stdout)
    names = {
        f"{o['kind']}/{o['metadata']['name']}"
        for o in left["items"]
        # What Kubernetes itself puts in every namespace.
        if o["metadata"]["name"] not in ("default", "kube-root-ca.crt")
    }
    assert names == {f"PersistentVolumeClaim/{CHECKPOINT_CLAIM}"}
