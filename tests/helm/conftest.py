"""Render the chart offline with Helm's Go SDK; load Kubernetes and CRD schemas once."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "headwater"
K8S = ROOT / "k8s"
# The operators' CRD schemas as validation fixtures (scripts/crd_fixture.py writes them).
CRD_SCHEMAS = Path(__file__).resolve().parent / "crd_schemas"
KUBERNETES_VERSION = "1.33.0"
RELEASE, NAMESPACE = "hw", "headwater"

MINIMAL: dict[str, Any] = {
    "enricher": {"enabled": False},
    "topics": {"hook": {"enabled": False}},
    "tests": {"enabled": False},
    "serviceAccount": {"create": False},
    "ingest": {
        "replicas": 1,
        "podDisruptionBudget": {"enabled": False},
        "networkPolicy": {"enabled": False},
        "service": {"headless": False},
        "auth": {"existingSecret": "gateway-tokens"},
    },
}

VALUES_SETS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "production": yaml.safe_load((K8S / "values-production.yaml").read_text()),
    "dev": yaml.safe_load((K8S / "values-dev.yaml").read_text()),
    "minimal": MINIMAL,
}


def render_files(values: dict[str, Any]) -> dict[str, str]:
    """Render the chart as an install of release "hw"; return {template path: text}."""
    import helm_python as helm

    chart = helm.Chart.load(str(CHART))
    return chart.render(copy.deepcopy(values), name=RELEASE, namespace=NAMESPACE, is_install=True)


def render(values: dict[str, Any]) -> list[dict[str, Any]]:
    """Render the chart and return every object (NOTES.txt left out)."""
    objects = []
    for path, text in render_files(values).items():
        if not path.endswith(".txt"):
            objects += [doc for doc in yaml.safe_load_all(text) if doc]
    return objects


@pytest.fixture(scope="session", params=list(VALUES_SETS))
def rendered(request: pytest.FixtureRequest) -> tuple[str, list[dict[str, Any]]]:
    """(name of the values set, its rendered objects), rendered once per session."""
    return request.param, render(VALUES_SETS[request.param])


def _strict(schema: Any) -> Any:
    """Return ``schema`` with unknown fields refused where the API server would prune them.

    CRD schemas leave additionalProperties open because the API server silently drops
    unknown fields; a typo in a template would then vanish on apply. Refusing them here
    turns that silent loss into a test failure.
    """
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strict(v) for k, v in schema.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def load_crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """{(apiVersion, kind): strict openAPIV3Schema} for every served version of every fixture."""
    schemas = {}
    for path in sorted(CRD_SCHEMAS.glob("*.json")):
        crd = json.loads(path.read_text())
        for version, schema in crd["versions"].items():
            schemas[(f"{crd['group']}/{version}", crd["kind"])] = _strict(schema)
    assert schemas, f"no CRD schema fixtures in {CRD_SCHEMAS}"
    return schemas


@pytest.fixture(scope="session")
def crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    return load_crd_schemas()


@pytest.fixture(scope="session")
def validate(crd_schemas):
    """Validate one object: CRD schema for custom resources, Kubernetes schema otherwise."""

    def check(obj: dict[str, Any]) -> None:
        key = (obj["apiVersion"], obj["kind"])
        if key in crd_schemas:
            error = jsonschema.exceptions.best_match(
                jsonschema.Draft7Validator(crd_schemas[key]).iter_errors(obj)
            )
            if error is not None:  # the message and path only: the schemas are huge
                raise AssertionError(f"at {error.json_path}: {error.message}")
        else:
            kubernetes_validate.validate(copy.deepcopy(obj), KUBERNETES_VERSION, strict=True)

    return check
