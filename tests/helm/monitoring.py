"""The chart's dashboard and alert rules as data: the metrics they use, the runbooks they link."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from .conftest import CHART, VALUES_SETS, render

#: A metric selector in PromQL: a name directly followed by its label matchers.
_SELECTOR = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)\{")


def dashboard() -> dict[str, Any]:
    """Return the dashboard JSON as shipped in the chart."""
    loaded: dict[str, Any] = json.loads((CHART / "dashboards" / "headwater.json").read_text())
    return loaded


def rules() -> list[dict[str, Any]]:
    """Return every alert rule of the production values set (all groups on)."""
    (rule,) = [o for o in render(VALUES_SETS["production"]) if o["kind"] == "PrometheusRule"]
    return [r for group in rule["spec"]["groups"] for r in group["rules"]]


def expressions() -> list[str]:
    """Return the PromQL of every dashboard target and every alert rule."""
    panels = dashboard()["panels"]
    return [t["expr"] for p in panels for t in p["targets"]] + [r["expr"] for r in rules()]


def metric_names(expr: str) -> set[str]:
    """Return the metric names one PromQL expression selects."""
    return set(_SELECTOR.findall(expr))


def metrics_used() -> set[str]:
    """Return the metric names the dashboard and the rules select."""
    return {name for expr in expressions() for name in metric_names(expr)}


def exported_names(scrape: str) -> set[str]:
    """Return the sample names of a Prometheus text exposition."""
    names = set()
    for line in scrape.splitlines():
        if line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


def runbook_anchors(doc: Path) -> set[str]:
    """Return the GitHub anchors of a Markdown file's headings."""
    anchors = set()
    for line in doc.read_text().splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            anchors.add(re.sub(r"[^a-z0-9 _-]", "", title).replace(" ", "-"))
    return anchors
