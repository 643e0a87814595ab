"""The metrics listener's pure parts: lag from progress, stats from the sink, the summary."""

from __future__ import annotations

import json
import re
from pathlib import Path

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from headwater.enricher.metrics import EnricherListener, lag_by_topic, percentile


def test_lag_by_topic() -> None:
    source = {
        "endOffset": json.dumps({"a": {"0": 5, "1": 7}}),
        "latestOffset": json.dumps({"a": {"0": 9, "1": 7}, "b": {"0": 3}}),
    }
    assert lag_by_topic(source) == {"a": 4, "b": 3}


def test_percentile() -> None:
    assert percentile([], 0.5) == 0.0
    assert percentile([float(i) for i in range(1, 101)], 0.99) == 99.0


def test_stats_become_metrics_and_summary(tmp_path: Path) -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    stats = tmp_path / "stats.jsonl"
    listener = EnricherListener(provider.get_meter("t"), str(stats))
    entry = {
        "batch_id": 0,
        "counts": {
            "event:telemetry": 3,
            "completion:ENRICHED": 3,
            "deadletter:UNKNOWN_FORMAT": 1,
            "completion:DEAD_LETTERED": 1,
            "retry:MASTER_DATA_MISSING": 2,
            "state:snapshot": 2,
        },
        "latency_ms": {"ingest_to_ack": [10.0, 20.0, 30.0]},
    }
    stats.write_text(json.dumps(entry) + "\n")
    listener.read_stats()
    listener.read_stats()  # idempotent: a line is folded in once
    s = listener.summary()
    assert (s["events"], s["state_snapshots"]) == (3, 2)
    assert s["completions"] == {"DEAD_LETTERED": 1, "ENRICHED": 3}
    assert (s["dead_letters"], s["retries"]) == ({"UNKNOWN_FORMAT": 1}, {"MASTER_DATA_MISSING": 2})
    assert s["latency_ms"]["ingest_to_ack"]["p50"] == 20.0
    names = {
        m.name
        for rm in reader.get_metrics_data().resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
    }
    assert {
        "headwater.enricher.dead_letters",
        "headwater.enricher.retries",
        "headwater.enricher.end_to_end.duration",
        "headwater.enricher.end_to_end.latency",
    } <= names
    provider.shutdown()


def test_prometheus_names_match_what_headwater_lag_reads(tmp_path: Path) -> None:
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from prometheus_client import REGISTRY, generate_latest

    from headwater.ops.lag import SIGNALS

    provider = MeterProvider(metric_readers=[PrometheusMetricReader()])
    stats = tmp_path / "stats.jsonl"
    listener = EnricherListener(provider.get_meter("t"), str(stats))
    entry = {"batch_id": 0, "counts": {"bytes": 1000}, "latency_ms": {"ingest_to_read": [1500.0]}}
    stats.write_text(json.dumps(entry) + "\n")
    listener.read_stats()
    text = generate_latest(REGISTRY).decode()
    provider.shutdown()
    for metric in SIGNALS.values():
        assert f"\n{metric}" in text or text.startswith(metric), metric
    assert re.search(
        r"^headwater_enricher_producer_to_consumer_latency_seconds\{.*\} 1\.5$", text, re.M
    )
