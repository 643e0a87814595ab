"""The dashboard and the alerts the chart ships: well formed, complete, each alert with a runbook.

Every series they use is checked against a scrape of the services' real instruments here,
and against a scrape of the running dev stack (tests/devstack/test_devstack_pipeline.py).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

from tests.support.monitoring import (
    dashboard,
    exported_names,
    exported_types,
    expressions,
    metric_names,
    metrics_used,
    quantile_series,
    rated_series,
    rules,
    runbook_anchors,
    scrape_of_the_services,
)

from .conftest import VALUES_SETS, render

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
        "rpc_server_call_duration_seconds",  # publish latency percentiles
        "headwater_ingest_frame_duration_seconds",  # stream frame latency
        "headwater_ingest_inflight_bytes",
        "headwater_enricher_consumer_lag_records",
        "headwater_enricher_end_to_end_duration_seconds",
        "headwater_enricher_dead_letters_total",
        "headwater_enricher_retries_total",
        "headwater_enricher_batch_duration_seconds",
        "headwater_enricher_producer_to_consumer_duration_seconds",  # consumer signals
        "headwater_enricher_consumer_to_processing_duration_seconds",
        "headwater_enricher_output_bytes_total",
        "headwater_enricher_input_records_total",
        # Issue 36: a broker lost, as ingest sees it (the "Kafka cluster" panels).
        "headwater_ingest_kafka_under_replicated_partitions",
        "headwater_ingest_kafka_offline_partitions",
        "headwater_ingest_unwritable_partitions",
        "headwater_ingest_kafka_writable",
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
        # Issue 36: the cluster's replication, as the ingest replicas see it.
        "HeadwaterKafkaOfflinePartitions",
        "HeadwaterKafkaUnderReplicated",
        "HeadwaterKafkaBelowMinInSync",
        "HeadwaterIngestCannotWrite",
    } <= set(alerts)
    anchors = runbook_anchors(OPERATIONS)
    for name, rule in alerts.items():
        url = rule["annotations"]["runbook_url"]
        assert url.startswith("https://"), name
        assert url.split("#", 1)[1] in anchors, f"{name}: no section for {url} in operations.md"
        assert rule["labels"]["severity"] in {"warning", "critical"}


def test_every_metric_is_a_headwater_metric():
    # The services export these (Headwater's own and the OpenTelemetry RPC convention's);
    # kube-state-metrics and friends are not assumed.
    assert metrics_used()
    assert all(m.startswith(("headwater_", "rpc_server_")) for m in metrics_used()), metrics_used()


def test_every_series_in_the_dashboard_and_alerts_is_in_a_scrape_of_the_services():
    scrape = scrape_of_the_services()
    missing = metrics_used() - exported_names(scrape)
    assert not missing, f"the dashboard or alerts use series nobody exports: {missing}"


def test_rates_and_quantiles_are_computed_by_promql_from_counters_and_histograms():
    types = exported_types(scrape_of_the_services())
    # No precomputed rate or quantile is exported at all.
    for name, kind in types.items():
        if kind == "gauge":
            assert not any(w in name for w in ("per_second", "_rate", "p99", "latency")), name
        if kind == "counter":
            assert name.endswith("_total"), name
    assert any(quantile_series(e) for e in expressions())  # the patterns do match
    for expr in expressions():
        for name in rated_series(expr):
            assert types.get(name) in {"counter", "histogram"}, (name, expr)
        for name in quantile_series(expr):
            assert name.endswith("_bucket") and types.get(name) == "histogram", (name, expr)
        for name in metric_names(expr) - rated_series(expr):
            # Read as it is only when it is a gauge (something held now, like the lag).
            assert types.get(name) == "gauge", (name, expr)


def test_thresholds_come_from_values():
    values = copy.deepcopy(VALUES_SETS["production"])
    values["prometheusRule"]["thresholds"] = {
        "endToEndP99Seconds": 7,
        "deadLettersPerSecond": 3,
        "underReplicatedFor": "30m",
    }
    (rule,) = [o for o in render(values) if o["kind"] == "PrometheusRule"]
    rules = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    assert rules["HeadwaterEndToEndLatencyHigh"]["expr"].rstrip().endswith("> 7")
    assert rules["HeadwaterDeadLetters"]["expr"].rstrip().endswith("> 3")
    assert rules["HeadwaterKafkaUnderReplicated"]["for"] == "30m"


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
