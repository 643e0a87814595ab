"""The Helm chart rendered offline with Helm's Go SDK, and the values sets the tests render.

Shared by tests/helm and the dev stack's monitoring test (tests/support/monitoring.py).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "headwater"
K8S = ROOT / "k8s"
# The operators' CRD schemas as validation fixtures (scripts/crd_fixture.py writes them).
CRD_SCHEMAS = ROOT / "tests" / "helm" / "crd_schemas"
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
    # The enricher without the Spark Operator: spark-submit from a Job (docs/deploy.md).
    "operator-free": {"enricher": {"runner": "sparkSubmit"}},
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
