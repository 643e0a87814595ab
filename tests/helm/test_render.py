"""The chart, rendered without a cluster: lint, schemas, CRDs and policies per values set."""

from __future__ import annotations

from typing import Any

import pytest

from headwater.topics import all_topics

from .conftest import CHART, NAMESPACE, RELEASE, VALUES_SETS, render, render_files

CUSTOM_KINDS = {"SparkApplication", "KafkaTopic", "ServiceMonitor", "PodMonitor", "PrometheusRule"}
POD_KINDS = {"Deployment", "Job", "Pod"}
STANDARD_LABELS = (
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/component",
    "helm.sh/chart",
)


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def one(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in by_kind(objects, kind) if name is None or o["metadata"]["name"] == name]
    assert len(found) == 1, (kind, name, [o["metadata"]["name"] for o in found])
    return found[0]


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    return obj["spec"] if obj["kind"] == "Pod" else obj["spec"]["template"]["spec"]


def is_hook(obj: dict[str, Any]) -> bool:
    return "helm.sh/hook" in obj["metadata"].get("annotations", {})


@pytest.mark.parametrize("name", list(VALUES_SETS))
def test_helm_lint_is_clean(name):
    import helm_python as helm

    result = helm.lint(str(CHART), values=VALUES_SETS[name], strict=True, namespace=NAMESPACE)
    assert not result["errors"], result["errors"]
    assert not [m for m in result["messages"] if m["severity"] >= 2], result["messages"]


def test_every_object_is_valid_against_kubernetes_or_its_crd(rendered, validate):
    name, objects = rendered
    assert objects
    for obj in objects:
        try:
            validate(obj)
        except Exception as exc:  # name the object in the failure
            pytest.fail(f"{name}: {obj['kind']} {obj['metadata']['name']}: {exc}")


def test_each_values_set_renders_what_it_asks_for(rendered):
    name, objects = rendered
    kinds = {o["kind"] for o in objects}
    expected = {
        "defaults": {"Deployment", "Service", "ConfigMap", "Secret", "SparkApplication", "Job"},
        "production": {
            "HorizontalPodAutoscaler",
            "PodDisruptionBudget",
            "NetworkPolicy",
            "SparkApplication",
            "KafkaTopic",
            "ServiceMonitor",
            "PodMonitor",
            "PrometheusRule",
        },
        "dev": {"Deployment", "SparkApplication", "KafkaTopic", "PersistentVolumeClaim"},
        "minimal": {"Deployment", "Service", "ConfigMap"},
        "operator-free": {"Deployment", "Job", "ConfigMap", "PersistentVolumeClaim", "Role"},
    }[name]
    assert expected <= kinds, expected - kinds
    if name == "operator-free":
        assert "SparkApplication" not in kinds
    if name == "defaults":
        # Add-ons beyond the Spark Operator stay off until asked for.
        assert not kinds & {"ServiceMonitor", "PodMonitor", "PrometheusRule", "KafkaTopic"}
        assert "HorizontalPodAutoscaler" not in kinds
    if name == "minimal":
        assert not kinds & (CUSTOM_KINDS | {"Job", "Secret", "ServiceAccount", "Role"})


def test_labels_and_selectors(rendered):
    name, objects = rendered
    for obj in objects:
        where = f"{name}: {obj['kind']} {obj['metadata']['name']}"
        labels = obj["metadata"].get("labels", {})
        for key in STANDARD_LABELS:
            assert labels.get(key), f"{where}: label {key} missing"
        assert labels["app.kubernetes.io/instance"] == RELEASE, where
        selectors = []
        spec = obj.get("spec", {})
        if isinstance(spec.get("selector"), dict):
            selectors.append(spec["selector"].get("matchLabels", spec["selector"]))
        if "podSelector" in spec:
            selectors.append(spec["podSelector"]["matchLabels"])
        for selector in selectors:
            assert not {"helm.sh/chart", "app.kubernetes.io/version"} & set(selector), where
            assert selector.get("app.kubernetes.io/instance") == RELEASE, where


def test_pod_policies(rendered):
    name, objects = rendered
    for obj in objects:
        if obj["kind"] not in POD_KINDS:
            continue
        where = f"{name}: {obj['kind']} {obj['metadata']['name']}"
        spec = pod_spec(obj)
        assert spec["securityContext"]["runAsNonRoot"] is True, where
        # Only Spark's submitter talks to the API server (it creates the driver pod).
        talks_to_api = spec.get("serviceAccountName") == f"{RELEASE}-headwater-spark"
        assert spec.get("automountServiceAccountToken") is (None if talks_to_api else False), where
        for c in spec["containers"]:
            image = c["image"]
            repository, _, tag = image.rpartition(":")
            assert repository and tag and "/" not in tag and tag != "latest", f"{where}: {image}"
            assert c["resources"]["requests"] and c["resources"]["limits"], where
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False, where
            assert sc["readOnlyRootFilesystem"] is True, where
            assert sc["capabilities"]["drop"] == ["ALL"], where
            if not is_hook(obj) and obj["kind"] != "Job":  # a Job's pod serves nothing
                assert {"readinessProbe", "livenessProbe", "startupProbe"} <= set(c), where


def test_spark_pods_are_non_root_and_sized(rendered):
    name, objects = rendered
    for app in by_kind(objects, "SparkApplication"):
        spec = app["spec"]
        assert spec["type"] == "Python" and spec["mode"] == "cluster"
        assert spec["sparkVersion"].startswith("4.")
        assert spec["restartPolicy"]["type"] == "OnFailure"
        assert spec["restartPolicy"]["onFailureRetries"] >= 1
        assert not spec["image"].endswith(":latest")
        assert spec["mainApplicationFile"].startswith("local:///")
        for role in ("driver", "executor"):
            pod = spec[role]
            assert pod["podSecurityContext"]["runAsNonRoot"] is True, (name, role)
            assert pod["securityContext"]["allowPrivilegeEscalation"] is False, (name, role)
            assert pod["cores"] >= 1 and pod["memory"] and pod["memoryOverhead"], (name, role)
        assert spec["executor"]["instances"] >= 1


def test_both_runners_ask_for_the_memory_beside_the_heap():
    """The pod's memory outside the heap (RocksDB, Arrow, the Python workers) is the
    values' memoryOverhead whichever runner submits the enricher, not Spark's 40%."""
    sized = {"driver": {"memoryOverhead": "640m"}, "executor": {"memoryOverhead": "3g"}}
    app = one(render({"enricher": sized}), "SparkApplication")["spec"]
    assert (app["driver"]["memoryOverhead"], app["executor"]["memoryOverhead"]) == ("640m", "3g")
    submit = [
        o for o in render({"enricher": {"runner": "sparkSubmit", **sized}}) if o["kind"] == "Job"
        and "submit" in o["metadata"]["name"]
    ]  # fmt: skip
    args = pod_spec(submit[0])["containers"][0]["args"]
    assert "spark.driver.memoryOverhead=640m" in args
    assert "spark.executor.memoryOverhead=3g" in args


def test_ingest_drains_before_the_pod_is_killed(rendered):
    name, objects = rendered
    deployment = one(objects, "Deployment")
    config = one(objects, "ConfigMap", f"{RELEASE}-headwater-ingest")["data"]
    spec = pod_spec(deployment)
    container = spec["containers"][0]
    pre_stop = container["lifecycle"]["preStop"]["sleep"]["seconds"]
    grace = float(config["HEADWATER_INGEST_DRAIN_GRACE_SECONDS"])
    assert spec["terminationGracePeriodSeconds"] > pre_stop + grace, name
    assert "checksum/config" in deployment["spec"]["template"]["metadata"]["annotations"]
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0


def test_ingest_pods_spread_over_zones_and_nodes(rendered):
    _, objects = rendered
    spec = pod_spec(one(objects, "Deployment"))
    keys = {c["topologyKey"] for c in spec["topologySpreadConstraints"]}
    assert "topology.kubernetes.io/zone" in keys
    assert spec["affinity"]["podAntiAffinity"]


def test_ingest_configuration_and_mounts(rendered):
    name, objects = rendered
    config = one(objects, "ConfigMap", f"{RELEASE}-headwater-ingest")["data"]
    assert config["HEADWATER_KAFKA_BOOTSTRAP_SERVERS"]
    assert config["HEADWATER_INGEST_LISTEN_ADDRESS"] == "[::]:50051"
    assert config["HEADWATER_INGEST_TOKENS_FILE"] == "/etc/headwater/gateways/tokens.yaml"
    container = pod_spec(one(objects, "Deployment"))["containers"][0]
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    # A directory mount: subPath mounts never see Secret updates, and tokens reload live.
    assert "subPath" not in mounts["/etc/headwater/gateways"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    probes = [container[f"{k}Probe"] for k in ("startup", "readiness", "liveness")]
    if "HEADWATER_INGEST_TLS_CERT_FILE" in config:
        assert "/etc/headwater/tls" in mounts
        assert config["HEADWATER_INGEST_TLS_CERT_FILE"].startswith("/etc/headwater/tls/")
        # The kubelet's gRPC probe has no TLS: with TLS it calls the plaintext health port,
        # which answers NOT_SERVING (a tcpSocket probe would not see it).
        assert config["HEADWATER_INGEST_HEALTH_PORT"] == "8086"
        assert ports == {"grpc": 50051, "metrics": 9464, "health": 8086}
        assert [p.get("grpc") for p in probes] == [{"port": 8086}] * 3
    else:
        assert "HEADWATER_INGEST_HEALTH_PORT" not in config
        assert ports == {"grpc": 50051, "metrics": 9464}
        assert [p.get("grpc") for p in probes] == [{"port": 50051}] * 3
    assert not any("tcpSocket" in p for p in probes)
    if name == "production":
        assert config["HEADWATER_INGEST_TLS_CLIENT_CA_FILE"] == "/etc/headwater/tls/ca.crt"


def test_tls_probes_use_the_health_port_that_values_name():
    values = {"ingest": {"tls": {"secretName": "ingest-tls", "healthPort": 9999}}}
    objects = render(values)
    config = one(objects, "ConfigMap", f"{RELEASE}-headwater-ingest")["data"]
    container = pod_spec(one(objects, "Deployment"))["containers"][0]
    assert config["HEADWATER_INGEST_HEALTH_PORT"] == "9999"
    assert {"name": "health", "containerPort": 9999, "protocol": "TCP"} in container["ports"]
    assert container["readinessProbe"]["grpc"] == {"port": 9999}
    assert container["livenessProbe"]["grpc"] == {"port": 9999}
    # The health port is for the kubelet only: the Service exposes gRPC and metrics.
    for service in by_kind(objects, "Service"):
        assert "health" not in {p["name"] for p in service["spec"]["ports"]}


def test_ingest_service_speaks_grpc(rendered):
    name, objects = rendered
    services = {s["metadata"]["name"]: s for s in by_kind(objects, "Service")}
    main = services[f"{RELEASE}-headwater-ingest"]
    grpc = next(p for p in main["spec"]["ports"] if p["name"] == "grpc")
    assert grpc["port"] == 50051 and grpc["appProtocol"] == "grpc"
    headless = services.get(f"{RELEASE}-headwater-ingest-headless")
    if name != "minimal":
        assert headless and headless["spec"]["clusterIP"] == "None"


def test_checkpoint_is_shared_by_driver_and_executors(rendered):
    _, objects = rendered
    for app in by_kind(objects, "SparkApplication"):
        volumes = {v["name"] for v in app["spec"].get("volumes", [])}
        if "checkpoint" in volumes:
            for role in ("driver", "executor"):
                mounts = {m["name"] for m in app["spec"][role]["volumeMounts"]}
                assert "checkpoint" in mounts, role


def test_config_change_rolls_the_pods():
    def checksum(values):
        deployment = one(render(values), "Deployment")
        return deployment["spec"]["template"]["metadata"]["annotations"]["checksum/config"]

    assert checksum({}) != checksum({"ingest": {"logLevel": "DEBUG"}})


def test_gateways_from_values_become_the_tokens_file():
    import yaml

    gateway = {
        "id": "gw-001",
        "tenant": "acme",
        "token_sha256": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        "devices": ["acme-*"],
        "revoked": False,
    }
    secret = one(render({"ingest": {"auth": {"gateways": [gateway]}}}), "Secret")
    assert yaml.safe_load(secret["stringData"]["tokens.yaml"]) == {"gateways": [gateway]}


def test_topics_match_the_declaration():
    declared = {t.name: t.config["cleanup.policy"] for t in all_topics()}
    values = {"topics": {"strimzi": {"enabled": True}, "hook": {"enabled": False}}}
    topics = by_kind(render(values), "KafkaTopic")
    assert {t["spec"]["topicName"]: t["spec"]["config"]["cleanup.policy"] for t in topics} == (
        declared
    )
    for topic in topics:
        config = topic["spec"]["config"]
        if config["cleanup.policy"] == "delete":
            assert config["retention.ms"] == str(7 * 24 * 3600 * 1000)


def test_topic_hook_runs_before_install_and_upgrade():
    job = one(render({}), "Job")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    container = pod_spec(job)["containers"][0]
    assert container["args"][:2] == ["topics", "ensure"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["HEADWATER_KAFKA_BOOTSTRAP_SERVERS"]
    # Drift (exit 3) fails the Job at once instead of being retried.
    rule = job["spec"]["podFailurePolicy"]["rules"][0]
    assert rule["action"] == "FailJob" and rule["onExitCodes"]["values"] == [3]


def test_helm_test_pod_checks_grpc_health():
    files = render_files({})
    test = next(text for path, text in files.items() if "/tests/" in path)
    assert "helm.sh/hook: test" in test
    assert "grpc_health" in test and "SERVING" in test


def test_notes_name_the_endpoint():
    notes = render_files({})["headwater/templates/NOTES.txt"]
    assert f"{RELEASE}-headwater-ingest.{NAMESPACE}.svc:50051" in notes


def test_enricher_gets_starting_offsets_only_when_a_person_sets_them():
    # A permanent default would let a lost checkpoint replay the retention silently.
    def config(values: dict[str, Any]) -> dict[str, str]:
        objects = render(values)
        return one(objects, "ConfigMap", f"{RELEASE}-headwater-enricher")["data"]

    assert "HEADWATER_ENRICHER_STARTING_OFFSETS" not in config({})
    explicit = config({"enricher": {"startingOffsets": "earliest"}})
    assert explicit["HEADWATER_ENRICHER_STARTING_OFFSETS"] == "earliest"


@pytest.mark.parametrize(
    ("interval", "seconds"),
    [(None, 1.0), ("500ms", 0.5), ("3s", 3.0), ("2m", 120.0), ("1h", 3600.0)],
)
def test_the_trigger_interval_of_the_values_reaches_the_enricher_in_seconds(interval, seconds):
    from headwater.enricher.driver.settings import EnricherSettings

    values = {"enricher": {"triggerInterval": interval}} if interval else {}
    data = one(render(values), "ConfigMap", f"{RELEASE}-headwater-enricher")["data"]
    settings = EnricherSettings.from_env(data)  # as the pod reads it: the new name, a number
    assert settings.trigger_interval_seconds == seconds
