"""The chart gives every Headwater process its pod, namespace and node (downward API).

The processes turn them into the OpenTelemetry resource (``service.instance.id``,
``k8s.pod.name``, ``k8s.namespace.name``, ``k8s.node.name``; see headwater.runtime.telemetry).
"""

from __future__ import annotations

from typing import Any

import pytest

from headwater.runtime.telemetry import K8S_ENV

from .conftest import VALUES_SETS, render

FIELDS = {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}
FIELDS["NODE_NAME"] = "spec.nodeName"


def _containers_env(objects: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Return {where: env list} for the ingest container and the enricher's pods."""
    found = {}
    for obj in objects:
        if obj["kind"] == "Deployment":
            for c in obj["spec"]["template"]["spec"]["containers"]:
                found[f"{obj['metadata']['name']}/{c['name']}"] = c.get("env", [])
        if obj["kind"] == "SparkApplication":
            for role in ("driver", "executor"):
                found[f"{obj['metadata']['name']}/{role}"] = obj["spec"][role].get("env", [])
    return found


@pytest.mark.parametrize("values", ["production", "defaults", "dev"])
def test_every_process_gets_pod_namespace_and_node_from_the_downward_api(values):
    envs = _containers_env(render(VALUES_SETS[values]))
    assert envs, "no Deployment or SparkApplication rendered"
    assert set(FIELDS) == set(K8S_ENV), "the chart and headwater.runtime.telemetry disagree"
    for where, env in envs.items():
        refs = {
            e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"]
            for e in env
            if "fieldRef" in e.get("valueFrom", {})
        }
        assert refs == FIELDS, where
        # First, so extraEnv entries can use $(POD_NAME).
        assert [e["name"] for e in env[:3]] == list(FIELDS), where


def test_extra_env_keeps_working_after_the_downward_entries():
    values = {**VALUES_SETS["production"]}
    values["ingest"] = {
        **values["ingest"],
        "extraEnv": [{"name": "OTEL_RESOURCE_ATTRIBUTES", "value": "pod=$(POD_NAME)"}],
    }
    (deployment,) = [o for o in render(values) if o["kind"] == "Deployment"]
    names = [e["name"] for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]]
    assert names.index("POD_NAME") < names.index("OTEL_RESOURCE_ATTRIBUTES")
