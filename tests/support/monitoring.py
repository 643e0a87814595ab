"""The chart's dashboard and alert rules as data: the metrics they use, the runbooks they link."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests.support.chart import CHART, VALUES_SETS, render

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


#: Functions whose argument must be a counter (or a histogram's _bucket/_sum/_count).
_RATE = re.compile(r"\b(?:rate|irate|increase)\(\s*([A-Za-z_:][A-Za-z0-9_:]*)\{")
#: histogram_quantile() and the first series selected inside it.
_QUANTILE = re.compile(r"histogram_quantile\([^{]*?([A-Za-z_:][A-Za-z0-9_:]*)\{")


def rated_series(expr: str) -> set[str]:
    """Return the series an expression takes rate(), irate() or increase() of."""
    return set(_RATE.findall(expr))


def quantile_series(expr: str) -> set[str]:
    """Return the series histogram_quantile() reads in an expression."""
    return set(_QUANTILE.findall(expr))


def exported_types(scrape: str) -> dict[str, str]:
    """Return {sample name: family type} of a Prometheus text exposition.

    A histogram's samples (``_bucket``, ``_sum``, ``_count``) map to ``histogram``.
    """
    families: dict[str, str] = {}
    for line in scrape.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()[:4]
            families[name] = kind
    types: dict[str, str] = {}
    for name in exported_names(scrape):
        for suffix in ("", "_bucket", "_sum", "_count"):
            family = name.removesuffix(suffix) if suffix else name
            if family in families and (not suffix or name.endswith(suffix)):
                types[name] = families[family]
                break
    return types


def scrape_of_the_services() -> str:
    """Return a Prometheus scrape of the ingest and enricher instruments, each recorded once.

    The real metric classes on the real exporter (a private registry), so the names and
    types are exactly what the services export; the dev stack's scrape checks the same
    against running processes (tests/devstack/test_devstack_pipeline.py).
    """
    import tempfile
    from types import SimpleNamespace

    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from opentelemetry.sdk.metrics import MeterProvider
    from prometheus_client import CollectorRegistry, generate_latest

    from headwater.enricher.driver.metrics import EnricherListener
    from headwater.ingest.metrics import IngestMetrics

    registry = CollectorRegistry()
    provider = MeterProvider(metric_readers=[PrometheusMetricReader(registry=registry)])
    ingest = IngestMetrics(provider.get_meter("headwater.ingest"))
    call = {"endpoint": "telemetry", "method": "publish", "code": "OK"}
    ingest.requests.add(1, call)
    ingest.messages.add(1, {"endpoint": "telemetry", "code": "OK"})
    ingest.received_bytes.add(10, {"endpoint": "telemetry", "code": "OK"})
    ingest.frame_duration.record(0.01, {"endpoint": "telemetry", "code": "OK"})
    ingest.produce_duration.record(0.01, {"topic": "ingest.telemetry.v1"})
    limit = {"endpoint": "telemetry", "method": "publish", "gateway": "gw", "limit": "bytes"}
    ingest.refused_calls.add(1, limit)
    ingest.refused_bytes.add(10, limit)
    ingest.rpc_call("headwater.ingest.v1.IngestService", "PublishTelemetry", "OK", 0.01)
    ingest.observe_inflight(lambda: (10, 1))
    ingest.observe_admission(lambda: 1, lambda: {"gw": 10})
    from headwater.ingest.writability import ClusterGauges, PartitionState

    cluster = ClusterGauges(provider.get_meter("headwater.ingest"))
    partition = PartitionState("ingest.telemetry.v1", 0, 1, 3, 3, 2)
    cluster.record([partition], {"ingest.telemetry.v1"})
    from headwater.ingest.commands.metrics import CommandMetrics

    commands = CommandMetrics(
        provider.get_meter("headwater.ingest.commands"),
        SimpleNamespace(size=3),  # type: ignore[arg-type]
        SimpleNamespace(size=2),  # type: ignore[arg-type]
        SimpleNamespace(open_streams=1),  # type: ignore[arg-type]
    )
    commands.queued.add(1)
    commands.delivered.add(1)
    commands.expired.add(1)
    commands.duplicates.add(1)
    commands.reports.add(1, {"state": "EXECUTED", "reason": ""})
    commands.delivery_duration.record(0.05)
    with tempfile.TemporaryDirectory() as tmp:
        stats = f"{tmp}/stats.jsonl"
        with open(stats, "w", encoding="utf-8") as f:
            entry = {
                "counts": {
                    "bytes": 100,
                    "event:telemetry": 1,
                    "deadletter:UNKNOWN_FORMAT": 1,
                    "retry:MASTER_DATA_MISSING": 1,
                },
                "latency_ms": {
                    "ingest_to_read": [1.0],
                    "read_to_ack": [1.0],
                    "ingest_to_ack": [2.0],
                },
            }
            f.write(json.dumps(entry) + "\n")
        listener = EnricherListener(provider.get_meter("headwater.enricher"), stats)
        source = SimpleNamespace(
            endOffset=json.dumps({"ingest.telemetry.v1": {"0": 1}}),
            latestOffset=json.dumps({"ingest.telemetry.v1": {"0": 2}}),
        )
        progress = SimpleNamespace(numInputRows=1, batchDuration=100, sources=[source])
        listener.onQueryProgress(SimpleNamespace(progress=progress))
    text: str = generate_latest(registry).decode()
    provider.shutdown()
    return text
