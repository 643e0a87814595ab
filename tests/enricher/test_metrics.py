"""The metrics listener's pure parts: lag from progress, stats from the sink, the summary."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from headwater.enricher.driver.metrics import EnricherListener, lag_by_topic, percentile


def test_lag_by_topic() -> None:
    source = {
        "endOffset": json.dumps({"a": {"0": 5, "1": 7}}),
        "latestOffset": json.dumps({"a": {"0": 9, "1": 7}, "b": {"0": 3}}),
    }
    assert lag_by_topic(source) == {"a": 4, "b": 3}


@pytest.mark.parametrize("offsets", ["", "null", "not json", "-1", '["a"]', '{"a": 3}'])
def test_offsets_that_are_not_kafkas_give_no_lag_and_no_error(offsets: str) -> None:
    assert lag_by_topic({"endOffset": offsets, "latestOffset": offsets}) == {}
    assert lag_by_topic({"endOffset": offsets, "latestOffset": '{"a": {"0": 2}}'}) == {"a": 2}


def test_percentile() -> None:
    assert percentile([], 0.5) == 0.0
    # The one convention (headwater.runtime.stats): interpolated, not nearest rank.
    assert percentile([float(i) for i in range(1, 101)], 0.99) == pytest.approx(99.01)
    assert percentile([1.0, 2.0, 3.0], 0.5) == 2.0


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
    } <= names
    assert not {n for n in names if n.endswith((".latency", ".rate", "per_second"))}, names
    provider.shutdown()


def _scrape(listener_stats: list[dict], tmp_path: Path) -> list[str]:
    """Feed stats entries to a listener one by one; return the Prometheus text after each."""
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry()
    provider = MeterProvider(metric_readers=[PrometheusMetricReader(registry=registry)])
    stats = tmp_path / "stats.jsonl"
    listener = EnricherListener(provider.get_meter("t"), str(stats))
    texts = []
    with stats.open("a") as f:
        for entry in listener_stats:
            f.write(json.dumps(entry) + "\n")
            f.flush()
            listener.read_stats()
            texts.append(generate_latest(registry).decode())
    provider.shutdown()
    return texts


def test_scrape_has_counters_and_histograms_with_units_and_no_precomputed_rates(
    tmp_path: Path,
) -> None:
    entry = {
        "batch_id": 0,
        "counts": {"bytes": 1000, "event:telemetry": 2, "deadletter:UNKNOWN_FORMAT": 1},
        "latency_ms": {"ingest_to_read": [1500.0], "read_to_ack": [20.0], "ingest_to_ack": [9.0]},
    }
    (text,) = _scrape([entry], tmp_path)
    types = dict(
        line.split()[2:4] for line in text.splitlines() if line.startswith("# TYPE headwater_")
    )
    assert types == {
        "headwater_enricher_records_written_total": "counter",
        "headwater_enricher_output_bytes_total": "counter",
        "headwater_enricher_dead_letters_total": "counter",
        "headwater_enricher_dedup_ids_forgotten_total": "counter",  # 0 until ids are forgotten
        "headwater_enricher_producer_to_consumer_duration_seconds": "histogram",
        "headwater_enricher_consumer_to_processing_duration_seconds": "histogram",
        "headwater_enricher_end_to_end_duration_seconds": "histogram",
    }, types
    assert re.search(r"^headwater_enricher_output_bytes_total\{.*\} 1000\.0$", text, re.M)


def test_headwater_lag_signals_come_from_the_scraped_counter_and_histograms(
    tmp_path: Path,
) -> None:
    from headwater.ops.scrape import SIGNALS, parse, signals

    first = {
        "batch_id": 0,
        "counts": {"bytes": 1000},
        "latency_ms": {"ingest_to_read": [1.5e3], "read_to_ack": [30.0]},
    }
    second = {"batch_id": 1, "counts": {"bytes": 3000}, "latency_ms": {"ingest_to_read": [0.2e3]}}
    one, two = _scrape([first, second], tmp_path)
    for series in SIGNALS.values():  # every series the signals read is exported
        assert f"\n{series}" in two, series
    # One scrape: quantiles over everything so far (PromQL's estimate within the bucket
    # 1 s..2.5 s), and no byte rate yet.
    alone = signals(parse(one, at=100.0), None)
    assert alone == {
        "producer_to_consumer_p99_s": pytest.approx(1 + 1.5 * 0.99),
        "consumer_to_processing_p99_s": pytest.approx(0.025 + 0.025 * 0.99),
    }
    # Two scrapes 2 s apart: the byte rate and the quantile over that interval only.
    window = signals(parse(two, at=102.0), parse(one, at=100.0))
    assert window["bytes_out_per_s"] == pytest.approx(3000 / 2)
    assert window["producer_to_consumer_p99_s"] == pytest.approx(0.1 + 0.15 * 0.99)
    # No new consumer-to-processing sample in the interval: everything so far.
    assert window["consumer_to_processing_p99_s"] == alone["consumer_to_processing_p99_s"]


def test_budget_dead_letters_are_counted_by_reason(tmp_path: Path) -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    stats = tmp_path / "stats.jsonl"
    listener = EnricherListener(provider.get_meter("t"), str(stats))
    counts = {
        "deadletter:NORMALIZE_BUDGET": 2,
        "deadletter:NORMALIZE_TOO_LARGE": 1,
        "deadletter:SPARKPLUG_LIMIT": 4,
        "deadletter:UNKNOWN_FORMAT": 8,
    }
    stats.write_text(json.dumps({"batch_id": 0, "counts": counts, "latency_ms": {}}) + "\n")
    listener.read_stats()
    points = {
        dict(p.attributes)["reason"]: p.value
        for rm in reader.get_metrics_data().resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == "headwater.enricher.normalize.budget_exceeded"
        for p in m.data.data_points
    }
    assert points == {"NORMALIZE_BUDGET": 2, "NORMALIZE_TOO_LARGE": 1, "SPARKPLUG_LIMIT": 4}
    provider.shutdown()


def test_dedup_ids_forgotten_counts_what_the_accumulator_grew_by_since_the_listener_began(
    tmp_path: Path,
) -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    total = [5]  # forgotten by an earlier query of the same Spark context

    def value() -> float:
        (point,) = [
            p.value
            for rm in reader.get_metrics_data().resource_metrics
            for sm in rm.scope_metrics
            for m in sm.metrics
            if m.name == "headwater.enricher.dedup.ids_forgotten"
            for p in m.data.data_points
        ]
        return point

    listener = EnricherListener(
        provider.get_meter("t"), str(tmp_path / "stats.jsonl"), lambda: total[0]
    )
    assert value() == 0
    for now, counted in [(12, 7), (12, 7), (40, 35)]:
        total[0] = now
        listener.read_ids_forgotten()
        assert value() == counted
    provider.shutdown()
