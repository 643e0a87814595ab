"""Every Kafka client the chart runs gets the same Kafka settings and the files they name.

The production values use Strimzi's mTLS listener: the cluster CA and the KafkaUser's
client certificate. Each pod that talks to Kafka (ingest, the topics hook, the enricher's
driver and executors) must carry ``HEADWATER_KAFKA_SSL_*`` pointing into a mounted Secret.
"""

from __future__ import annotations

import copy
from pathlib import PurePosixPath
from typing import Any

import pytest

from .conftest import VALUES_SETS, render

FILE_SETTINGS = {
    "HEADWATER_KAFKA_SSL_CA_LOCATION": "headwater-cluster-ca-cert",
    "HEADWATER_KAFKA_SSL_CERTIFICATE_LOCATION": "headwater",
    "HEADWATER_KAFKA_SSL_KEY_LOCATION": "headwater",
}


def _production_with_hook() -> dict[str, Any]:
    values = copy.deepcopy(VALUES_SETS["production"])
    values.setdefault("topics", {}).setdefault("strimzi", {})["enabled"] = False
    values["topics"].setdefault("hook", {})["enabled"] = True
    return values


def _kafka_pods(objects: list[dict[str, Any]]) -> dict[str, tuple[dict, list, list]]:
    """{pod: (env by name, volumes, mounts)} of every pod that runs a Kafka client."""
    pods: dict[str, tuple[dict, list, list]] = {}
    for obj in objects:
        kind = obj["kind"]
        if kind == "Deployment" or (kind == "Job" and "topics" in obj["metadata"]["name"]):
            spec = obj["spec"]["template"]["spec"]
            (container,) = [c for c in spec["containers"] if c["name"] in ("ingest", "topics")]
            env = {e["name"]: e.get("value") for e in container.get("env", [])}
            pods[f"{kind}/{container['name']}"] = (
                env,
                spec.get("volumes", []),
                container.get("volumeMounts", []),
            )
        elif kind == "SparkApplication":
            for role in ("driver", "executor"):
                pod = obj["spec"][role]
                env = {e["name"]: e.get("value") for e in pod.get("env", [])}
                pods[f"enricher/{role}"] = (
                    env,
                    obj["spec"].get("volumes", []),
                    pod.get("volumeMounts", []),
                )
    return pods


def test_every_kafka_pod_mounts_the_ca_and_client_certificate():
    pods = _kafka_pods(render(_production_with_hook()))
    assert set(pods) == {"Deployment/ingest", "Job/topics", "enricher/driver", "enricher/executor"}
    for pod, (env, volumes, mounts) in pods.items():
        secret_of = {v["name"]: v.get("secret", {}).get("secretName") for v in volumes}
        for setting, secret in FILE_SETTINGS.items():
            path = PurePosixPath(env.get(setting) or "")
            assert path.name, f"{pod}: {setting} not set"
            mount = next((m for m in mounts if PurePosixPath(m["mountPath"]) == path.parent), None)
            assert mount is not None, f"{pod}: nothing mounted at {path.parent}"
            assert secret_of.get(mount["name"]) == secret, f"{pod}: {setting} from {mount}"


def test_a_client_certificate_needs_tls():
    values = copy.deepcopy(VALUES_SETS["production"])
    values["kafka"]["securityProtocol"] = "PLAINTEXT"
    with pytest.raises(Exception, match="clientSecret"):
        render(values)
