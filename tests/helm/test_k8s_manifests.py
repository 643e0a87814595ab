"""The cluster prerequisites in k8s/ validate like the chart's objects."""

from __future__ import annotations

import pytest
import yaml

from headwater.topics import all_topics

from .conftest import K8S

# Manifests to apply; the values-*.yaml files are chart values (ours, the Spark Operator's).
MANIFESTS = sorted(p.name for p in K8S.glob("*.yaml") if "values" not in p.name)


def docs(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((K8S / name).read_text()) if d]


@pytest.mark.parametrize("name", MANIFESTS)
def test_manifest_is_valid(name, validate):
    for doc in docs(name):
        try:
            validate(doc)
        except Exception as exc:
            pytest.fail(f"{name}: {doc['kind']} {doc['metadata']['name']}: {exc}")
        assert doc["metadata"].get("namespace", "headwater") == "headwater"


def test_strimzi_cluster_survives_one_broker_loss():
    objects = docs("kafka.yaml")
    pool = next(d for d in objects if d["kind"] == "KafkaNodePool")
    kafka = next(d for d in objects if d["kind"] == "Kafka")
    assert pool["spec"]["replicas"] == 3
    assert set(pool["spec"]["roles"]) == {"controller", "broker"}
    config = kafka["spec"]["kafka"]["config"]
    assert config["default.replication.factor"] == 3
    assert config["min.insync.replicas"] == 2
    assert config["auto.create.topics.enable"] is False


def test_topic_manifests_match_the_declaration():
    declared = {t.name: t.config for t in all_topics()}
    topics = {d["spec"]["topicName"]: d["spec"] for d in docs("kafka-topics.yaml")}
    assert set(topics) == set(declared)
    for name, spec in topics.items():
        for key, value in declared[name].items():
            assert str(spec["config"][key]) == value, (name, key)
        assert spec["replicas"] == 3 and str(spec["config"]["min.insync.replicas"]) == "2"


def test_spark_rbac_lets_the_driver_manage_executors():
    role = next(d for d in docs("spark-rbac.yaml") if d["kind"] == "Role")
    resources = {r for rule in role["rules"] for r in rule["resources"]}
    assert {"pods", "services", "configmaps", "persistentvolumeclaims"} <= resources


def test_spark_operator_watches_the_headwater_namespace():
    values = yaml.safe_load((K8S / "spark-operator-values.yaml").read_text())
    assert "headwater" in values["spark"]["jobNamespaces"]
