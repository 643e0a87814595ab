"""`headwater lag --metrics-url`: the consumer signals from a real scrape endpoint.

The enricher's listener records into a private registry served by prometheus_client's own
HTTP server on loopback; ``scrape_signals`` computes rates and quantiles from it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from prometheus_client import CollectorRegistry, start_http_server

from headwater.enricher.driver.metrics import EnricherListener
from headwater.ops import scrape
from headwater.ops.lag import scrape_signals
from headwater.ops.scrape import histogram_quantile
from headwater_dev.devstack.ports import free_port


def test_watch_gets_the_byte_rate_and_window_quantiles_between_scrapes(tmp_path: Path, monkeypatch):
    registry = CollectorRegistry()
    provider = MeterProvider(metric_readers=[PrometheusMetricReader(registry=registry)])
    stats = tmp_path / "stats.jsonl"
    listener = EnricherListener(provider.get_meter("headwater.enricher"), str(stats))
    port = free_port()
    server, _thread = start_http_server(port, "127.0.0.1", registry=registry)
    url = f"http://127.0.0.1:{port}/metrics"
    clock = iter([50.0, 54.0])
    monkeypatch.setattr(scrape.time, "monotonic", lambda: next(clock))
    try:
        with stats.open("a") as f:
            f.write(json.dumps({"counts": {"bytes": 400}, "latency_ms": {"read_to_ack": [7.0]}}))
            f.write("\n")
        listener.read_stats()
        first = scrape_signals(url)
        with stats.open("a") as f:
            f.write(json.dumps({"counts": {"bytes": 2000}, "latency_ms": {"read_to_ack": [300]}}))
            f.write("\n")
        listener.read_stats()
        second = scrape_signals(url)
    finally:
        server.shutdown()
        provider.shutdown()
    # First scrape: no rate yet; the quantile over everything (7 ms, bucket 5..10 ms).
    assert "bytes_out_per_s" not in first
    assert first["consumer_to_processing_p99_s"] == pytest.approx(0.005 + 0.005 * 0.99)
    # Second scrape, 4 s later: 2000 bytes in 4 s; the quantile of the new sample only.
    assert second["bytes_out_per_s"] == pytest.approx(500.0)
    assert second["consumer_to_processing_p99_s"] == pytest.approx(0.25 + 0.25 * 0.99)


def test_histogram_quantile_follows_promql():
    buckets = {0.1: 10.0, 0.5: 60.0, 1.0: 100.0, float("inf"): 100.0}
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.1 + 0.4 * 40 / 50)
    assert histogram_quantile(0.05, buckets) == pytest.approx(0.05)
    # A rank in the +Inf bucket answers the highest finite bound.
    assert histogram_quantile(0.99, {1.0: 1.0, float("inf"): 5.0}) == 1.0
    assert histogram_quantile(0.99, {1.0: 0.0, float("inf"): 0.0}) is None
