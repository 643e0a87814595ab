"""Render the chart offline with Helm's Go SDK and load the CRD schemas of the operators."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "headwater"
CRDS = ROOT.parent / "shared" / "crds"
K8S = ROOT / "k8s"
KUBERNETES_VERSION = "1.33.0"

VALUES_SETS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "production": yaml.safe_load((K8S / "values-production.yaml").read_text()),
    "dev": yaml.safe_load((K8S / "values-dev.yaml").read_text()),
    "minimal": {
        "enricher": {"enabled": False},
        "topics": {"hook": {"enabled": False}},
        "ingest": {
            "autoscaling": {
                "enabled": False,
                "minReplicas": 1,
                "maxReplicas": 1,
                "targetCPUUtilizationPercentage": 80,
            },
            "podDisruptionBudget": {"enabled": False, "minAvailable": 1},
            "networkPolicy": {"enabled": False, "ingressFrom": []},
            "service": {"type": "ClusterIP", "port": 50051, "headless": False, "annotations": {}},
        },
        "serviceAccount": {"create": False, "annotations": {}},
    },
}


def render(values: dict[str, Any]) -> list[dict[str, Any]]:
    """Render the chart as an install of release "hw" and return every object."""
    import helm_python as helm

    chart = helm.Chart.load(str(CHART))
    files = chart.render(values, name="hw", namespace="headwater", is_install=True)
    objects = []
    for path, text in files.items():
        if path.endswith(".txt"):
            continue
        objects += [doc for doc in yaml.safe_load_all(text) if doc]
    return objects


@pytest.fixture(scope="session", params=list(VALUES_SETS))
def rendered(request: pytest.FixtureRequest) -> tuple[str, list[dict[str, Any]]]:
    return request.param, render(VALUES_SETS[request.param])


def crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """Return {(apiVersion, kind): openAPIV3Schema} for every served CRD version."""
    schemas = {}
    for path in CRDS.glob("*.yaml"):
        crd = yaml.safe_load(path.read_text())
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            if version.get("served"):
                schemas[(f"{group}/{version['name']}", kind)] = version["schema"]["openAPIV3Schema"]
    return schemas
