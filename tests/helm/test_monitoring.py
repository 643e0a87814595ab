"""The dashboard and the alerts the chart ships: well formed, complete, each alert with a runbook.

That every metric they use is really exported is checked against a scrape of the running
dev stack (tests/devstack/test_devstack_pipeline.py).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

from .conftest import VALUES_SETS, render
from .monitoring import dashboard, metric_names, metrics_used, rules, runbook_anchors

OPERATIONS = Path(__file__).parents[2] / "docs" / "operations.md"


def test_dashboard_is_well_formed_and_templated():
    dash = dashboard()
    assert dash["uid"] and dash["title"]
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    variables = {v["name"] for v in dash["templating"]["list"]}
    assert {"datasource", "namespace"} <= variables
    for panel in dash["panels"]:
        assert panel["title"] and panel["description"], panel
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]
            assert 'namespace="$namespace"' in target["expr"], (panel["title"], target["expr"])


def test_dashboard_shows_what_operators_look_for():
    used = {
        name.removesuffix("_bucket")
        for p in dashboard()["panels"]
        for t in p["targets"]
        for name in metric_names(t["expr"])
    }
    wanted = {
        "headwater_ingest_requests_total",  # rate and errors by code
        "headwater_ingest_request_duration_seconds",  # latency percentiles
        "headwater_ingest_inflight_bytes",
        "headwater_enricher_consumer_lag_records",
        "headwater_enricher_end_to_end_duration_seconds",
        "headwater_enricher_dead_letters_total",
        "headwater_enricher_retries_total",
        "headwater_enricher_batch_duration_seconds",
    }
    assert wanted <= used, wanted - used


def test_the_alerts_the_issue_names_exist_and_link_to_a_runbook_section():
    alerts = {r["alert"]: r for r in rules()}
    assert {
        "HeadwaterEnricherLagGrowing",
        "HeadwaterDeadLetters",
        "HeadwaterIngestErrorRate",
        "HeadwaterEnricherQueryDown",
        "HeadwaterEndToEndLatencyHigh",
    } <= set(alerts)
    anchors = runbook_anchors(OPERATIONS)
    for name, rule in alerts.items():
        url = rule["annotations"]["runbook_url"]
        assert url.startswith("https://"), name
        assert url.split("#", 1)[1] in anchors, f"{name}: no section for {url} in operations.md"
        assert rule["labels"]["severity"] in {"warning", "critical"}


def test_every_metric_is_a_headwater_metric():
    # The services export these; kube-state-metrics and friends are not assumed.
    assert metrics_used()
    assert all(m.startswith("headwater_") for m in metrics_used()), metrics_used()


def test_thresholds_come_from_values():
    values = copy.deepcopy(VALUES_SETS["production"])
    values["prometheusRule"]["thresholds"] = {"endToEndP99Seconds": 7, "deadLettersPerSecond": 3}
    (rule,) = [o for o in render(values) if o["kind"] == "PrometheusRule"]
    exprs = {r["alert"]: r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]}
    assert exprs["HeadwaterEndToEndLatencyHigh"].rstrip().endswith("> 7")
    assert exprs["HeadwaterDeadLetters"].rstrip().endswith("> 3")


def test_dashboard_configmap_carries_the_json_for_the_sidecar():
    (cm,) = [
        o
        for o in render(VALUES_SETS["production"])
        if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-dashboard")
    ]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(cm["data"]["headwater.json"]) == dashboard()
    defaults = render(VALUES_SETS["defaults"])
    assert not [o for o in defaults if o["metadata"]["name"].endswith("-dashboard")]
