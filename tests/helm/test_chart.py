"""The chart, checked without a cluster: render, lint, schemas, CRDs and policies."""

from __future__ import annotations

import copy
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from headwater.topics import all_topics

from .conftest import CHART, K8S, KUBERNETES_VERSION, VALUES_SETS, crd_schemas, render

CRD_SCHEMAS = crd_schemas()
WORKLOADS = {"Deployment", "Job", "Pod"}


def containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    spec = obj["spec"]
    if obj["kind"] == "Pod":
        return spec["containers"]
    return spec["template"]["spec"]["containers"]


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    return obj["spec"] if obj["kind"] == "Pod" else obj["spec"]["template"]["spec"]


def validate(obj: dict[str, Any]) -> None:
    key = (obj["apiVersion"], obj["kind"])
    if key in CRD_SCHEMAS:
        jsonschema.validate(obj, CRD_SCHEMAS[key])
    else:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


def test_helm_lint_is_clean():
    import helm_python as helm

    for values in VALUES_SETS.values():
        result = helm.lint(str(CHART), values=values)
        assert not result["errors"], result
        assert all(m["severity"] < 2 for m in result["messages"]), result["messages"]


def test_every_rendered_object_is_valid(rendered):
    name, objects = rendered
    assert objects, name
    for obj in objects:
        try:
            validate(obj)
        except Exception as exc:  # name the object in the failure
            pytest.fail(f"{name}: {obj['kind']} {obj['metadata']['name']}: {exc}")


def test_custom_resources_are_checked_against_their_crds(rendered):
    name, objects = rendered
    kinds = {o["kind"] for o in objects}
    if name == "production":
        assert {"SparkApplication", "KafkaTopic", "ServiceMonitor"} <= kinds
    if name == "defaults":
        assert "SparkApplication" in kinds and "Job" in kinds


def test_policies(rendered):
    name, objects = rendered
    for obj in objects:
        labels = obj["metadata"].get("labels", {})
        assert labels.get("app.kubernetes.io/name") == "headwater", (name, obj["kind"])
        assert labels.get("app.kubernetes.io/instance") == "hw"
        selector = obj.get("spec", {}).get("selector", {})
        match = selector.get("matchLabels", selector) if isinstance(selector, dict) else {}
        assert "helm.sh/chart" not in match and "app.kubernetes.io/version" not in match
        if obj["kind"] not in WORKLOADS:
            continue
        spec = pod_spec(obj)
        assert spec["securityContext"]["runAsNonRoot"] is True, obj["metadata"]["name"]
        for c in containers(obj):
            image = c["image"]
            assert ":" in image and not image.endswith(":latest"), image
            assert c["resources"]["requests"] and c["resources"]["limits"], c["name"]
            assert c["securityContext"]["allowPrivilegeEscalation"] is False
            if obj["kind"] == "Deployment":
                assert {"readinessProbe", "livenessProbe"} <= set(c), c["name"]
                assert c["readinessProbe"]["grpc"]["port"] == 50051


def test_ingest_drains_before_the_pod_is_killed():
    objects = render({})
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    config = next(
        o
        for o in objects
        if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "hw-headwater-ingest"
    )
    grace = float(config["data"]["HEADWATER_INGEST_DRAIN_GRACE_SECONDS"])
    spec = deployment["spec"]["template"]["spec"]
    pre_stop = spec["containers"][0]["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert spec["terminationGracePeriodSeconds"] > grace + pre_stop
    assert "checksum/config" in deployment["spec"]["template"]["metadata"]["annotations"]


def test_config_change_rolls_the_pods():
    def checksum(values):
        dep = next(o for o in render(values) if o["kind"] == "Deployment")
        return dep["spec"]["template"]["metadata"]["annotations"]["checksum/config"]

    assert checksum({}) != checksum({"ingest": {"logLevel": "DEBUG"}})


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"bogus": 1}, "additional properties 'bogus' not allowed"),
        ({"ingest": {"replicas": -1}}, "/ingest/replicas"),
        ({"enricher": {"kafkaIO": "spark"}}, "/enricher/kafkaIO"),
        ({"image": {"tag": "latest"}}, "/image/tag"),
        ({"kafka": {"securityProtocol": "TLS"}}, "/kafka/securityProtocol"),
        ({"ingest": {"limits": {"maxPayloadBytes": 10_000_000}}}, "/ingest/limits/maxPayloadBytes"),
    ],
)
def test_schema_rejects_bad_values_with_a_clear_message(values, message):
    import helm_python as helm

    with pytest.raises(helm.HelmValuesError, match=message.replace("'", ".")):
        render(values)


def test_topics_in_the_chart_and_k8s_match_the_declaration():
    declared = {t.name: t.config["cleanup.policy"] for t in all_topics()}
    rendered = {
        o["spec"]["topicName"]: o["spec"]["config"]["cleanup.policy"]
        for o in render({"topics": {"strimzi": {"enabled": True, "clusterName": "headwater"}}})
        if o["kind"] == "KafkaTopic"
    }
    manifests = {
        d["spec"]["topicName"]: d["spec"]["config"]["cleanup.policy"]
        for d in yaml.safe_load_all((K8S / "kafka-topics.yaml").read_text())
    }
    assert rendered == declared == manifests


# Manifests to apply; the values files are for charts (ours, the Spark Operator's).
MANIFESTS = sorted(p.name for p in K8S.glob("*.yaml") if "values" not in p.name)


@pytest.mark.parametrize("path", MANIFESTS)
def test_k8s_manifests_are_valid(path):
    for doc in yaml.safe_load_all((K8S / path).read_text()):
        if doc:
            validate(copy.deepcopy(doc))


def test_strimzi_cluster_survives_one_broker_loss():
    docs = list(yaml.safe_load_all((K8S / "kafka.yaml").read_text()))
    pool = next(d for d in docs if d["kind"] == "KafkaNodePool")
    kafka = next(d for d in docs if d["kind"] == "Kafka")
    assert pool["spec"]["replicas"] == 3
    assert kafka["spec"]["kafka"]["config"]["default.replication.factor"] == 3
    assert kafka["spec"]["kafka"]["config"]["min.insync.replicas"] == 2
