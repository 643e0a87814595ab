"""``headwater chaos`` refuses production on Kubernetes: the decision, and the CLI's answers
that need no cluster (the live refusal is in tests/k8s/test_chart_ops.py); how the broker pod
to delete is found (by name, or as the leader Kafka names: the session's broker answers)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from headwater_dev.chaos.devstack import ChaosError, leader_id
from headwater_dev.chaos.kube import broker_role, choose, executor_role, node_pod
from headwater_dev.chaos.production import production_refusal, refusal_line

HEADWATER = str(Path(sys.executable).parent / "headwater")


@pytest.mark.parametrize(
    ("labels", "refused_because"),
    [
        ({"headwater.dev/environment": "production"}, "headwater.dev/environment=production"),
        ({"environment": "Prod"}, "environment=Prod"),
        ({"env": " production "}, "env= production "),
        (None, "cannot read the labels of namespace 'hw'"),
    ],
)
def test_a_namespace_labelled_production_or_unreadable_is_refused(labels, refused_because):
    reason = production_refusal("kind-dev", "kind-dev", "hw", labels)
    assert reason is not None and refused_because in reason


@pytest.mark.parametrize(
    "labels",
    [
        {},
        {"headwater.dev/environment": "staging"},
        {"env": "preprod"},  # a word of its own, not a part of one
        {"team": "production"},  # not a label that names the environment
        {"pod-security.kubernetes.io/enforce": "restricted"},
    ],
)
def test_other_namespaces_are_not_production(labels):
    assert production_refusal("staging", "staging-eu", "hw", labels) is None


@pytest.mark.parametrize(
    ("context", "cluster", "named"),
    [
        ("prod", "c1", "kube context 'prod'"),
        ("admin@eu-prod-1", "c1", "kube context 'admin@eu-prod-1'"),
        ("ops", "gke_acme_europe-west1_production", "cluster 'gke_acme_europe-west1_production'"),
        ("arn:aws:eks:eu-west-1:1:cluster/PROD", "x", "kube context"),
    ],
)
def test_a_context_or_cluster_named_production_is_refused_whatever_the_labels(
    context, cluster, named
):
    reason = production_refusal(context, cluster, "hw", {})
    assert reason is not None and named in reason


def test_not_production_when_prod_is_only_part_of_a_word():
    assert production_refusal("product-demo", "reproduce", "hw", {}) is None


def test_the_refusal_is_one_line_naming_the_override():
    line = refusal_line("namespace 'hw' is labelled env=prod")
    assert "\n" not in line
    assert line.startswith("refused: namespace 'hw' is labelled env=prod;")
    assert "--i-know-this-is-production" in line


def test_pods_are_selected_by_their_owners_labels():
    broker = broker_role("kafka", "headwater", "hw")
    assert broker.selector == (
        "strimzi.io/cluster=headwater,strimzi.io/kind=Kafka,strimzi.io/broker-role=true"
    )
    executor = executor_role("hw-ns", "hw")
    assert executor.selector == (
        "spark-role=executor,app.kubernetes.io/instance=hw,app.kubernetes.io/component=enricher"
    )
    running = ["headwater-brokers-0", "headwater-brokers-1", "headwater-brokers-2"]
    assert choose(broker, running, None, "kafka") == "headwater-brokers-2"
    assert choose(executor, ["exec-1", "exec-2"], None, "hw-ns") == "exec-1"
    assert choose(broker, running, "headwater-brokers-0", "kafka") == "headwater-brokers-0"
    with pytest.raises(ChaosError, match="'ingest-0' is not a running Strimzi broker pod"):
        choose(broker, running, "ingest-0", "kafka")
    with pytest.raises(ChaosError, match="no running Spark executor pod in namespace 'hw-ns'"):
        choose(executor, [], None, "hw-ns")


def test_the_leader_is_the_broker_pod_named_after_its_node_id():
    """Strimzi's names (<cluster>-<pool>-<node id>) and a StatefulSet's (<name>-<ordinal>)."""
    broker = broker_role("kafka", "headwater", "hw")
    running = ["headwater-brokers-0", "headwater-brokers-1", "headwater-brokers-10"]
    assert node_pod(broker, running, 1, "kafka") == "headwater-brokers-1"
    assert node_pod(broker, running, 10, "kafka") == "headwater-brokers-10"
    with pytest.raises(ChaosError, match="no single running Strimzi broker pod for Kafka node 2"):
        node_pod(broker, running, 2, "kafka")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["kill-executor", "--namespace", "hw", "--kubeconfig", "/nonexistent"], "kubeconfig"),
        (["kill-executor", "--pod", "x"], "give --namespace too"),
        (["kill-broker", "--namespace", "hw", "--leader-of", "t"], "give --bootstrap-servers"),
        (["kill-broker", "--namespace", "hw", "--leader-of", "t", "--pod", "p"], "give one"),
        (["kill-broker", "--bootstrap-servers", "k:9092"], "give --namespace too"),
        (["kill-executor", "--namespace", "hw", "--worker", "1"], "dev stack only"),
    ],
)
def test_kubernetes_options_misused_exit_2_with_one_line(tmp_path, args, says):
    done = subprocess.run(
        [HEADWATER, "chaos", *args], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert says in done.stdout and done.stdout.count("\n") == 1, done.stdout


def test_the_leader_is_asked_of_kafka_and_a_missing_topic_is_one_line(
    kafka_bootstrap, topic_factory
):
    """What ``--leader-of`` asks Kafka on Kubernetes (the session's single broker: node 1)."""
    assert leader_id(kafka_bootstrap, topic_factory("chaos"), "Kafka") == 1
    with pytest.raises(ChaosError, match=r"^no topic 'chaos\.missing' on Kafka$"):
        leader_id(kafka_bootstrap, "chaos.missing", "Kafka")
