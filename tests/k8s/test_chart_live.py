"""The chart installed for real with ``helm`` on the one-node cluster, data flowing end to end.

Kafka is outside the cluster (the embedded broker on the host side of the veth), as with a
managed Kafka; the chart's topic hook creates the topics; a gateway on the host publishes
through the ingest Service's cluster IP (routed over the veth); the enricher runs without
an operator (``enricher.runner=sparkSubmit``: spark-submit in cluster mode from a Job), its
driver and executor as pods of the restricted namespace of k8s/namespace.yaml; its
checkpoint is a PVC bound to a hostPath volume made here (the cluster has no storage
provisioner). Figures (helm install to the first completion, and its parts) are printed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from headwater.topics import all_topics
from tests.k8s.live import pods, publish, running, wait_completed
from tests.k8s.release import (
    DRIVER,
    EXECUTORS,
    FIRST_COMPLETION_WITHIN_S,
    NAMESPACE,
    RELEASE,
    Install,
)

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(2400)]


def test_install_to_first_completion_within_target(installed: Install):
    assert installed.figures["first_completion_s"] <= FIRST_COMPLETION_WITHIN_S, installed.figures


def test_the_enricher_runs_as_driver_and_executor_pods(installed: Install):
    driver = pods(installed.cluster, NAMESPACE, DRIVER)
    executors = pods(installed.cluster, NAMESPACE, EXECUTORS)
    assert len(driver) == 1 and running(driver[0])
    assert executors and all(running(p) for p in executors)
    owner = driver[0]["metadata"]["ownerReferences"][0]
    assert owner["kind"] == "Pod" and owner["name"].startswith(
        f"{RELEASE}-headwater-enricher-submit"
    )


def test_the_topic_hook_created_the_topics(installed: Install):
    """With the values' 3 partitions (a topic the broker made itself would have 1)."""
    listed = AdminClient({"bootstrap.servers": installed.host_bootstrap}).list_topics(timeout=30)
    expected = {spec.name for spec in all_topics(partitions=3, replication_factor=1)}
    assert expected <= set(listed.topics)
    assert {len(listed.topics[name].partitions) for name in expected} == {3}


def test_every_message_a_gateway_publishes_is_completed(installed: Install, tmp_path: Path):
    ids = set(publish(installed.target, installed.token, tmp_path / "spool.db", 50))
    assert len(ids) == 50
    outcomes = wait_completed(installed.host_bootstrap, ids, 300)
    assert set(outcomes.values()) == {"OUTCOME_ENRICHED"}


def test_helm_test_passes(installed: Install):
    out = installed.helm("test", RELEASE, "--timeout=5m")
    assert "Phase:          Succeeded" in out or "Succeeded" in out
