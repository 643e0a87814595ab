"""The README's run command with the enricher: every message ends in a completion, and the
dashboard and alerts of the chart use only metrics the running services export."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.monitoring import (
    exported_names,
    exported_types,
    expressions,
    metrics_used,
    rated_series,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_whole_pipeline_then_dashboard_metrics_against_its_scrape(tmp_path):
    workdir = tmp_path / "stack"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "headwater.cli",
            "devstack",
            "run",
            "--duration",
            "20",
            "--rate",
            "200",
            "--gateways",
            "3",
            "--devices",
            "10",
            "--enricher-drain",
            "120",
            "--json",
            "--workdir",
            str(workdir),
        ],
        capture_output=True,
        text=True,
        timeout=420,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["acked_but_missing_in_kafka"] == 0
    enricher = summary["enricher"]
    assert enricher["messages_without_terminal_completion"] == 0, enricher
    # The fleet's mix shows up as every kind of outcome.
    assert enricher["completions"]["ENRICHED"] > 1000
    assert enricher["completions"]["DUPLICATE"] > 0
    assert enricher["completions"]["DEAD_LETTERED"] > 0
    assert enricher["retries"] > 0, "late master data should have parked some messages"
    # Not events >= ENRICHED: a Sparkplug birth certificate or an OPC UA keep-alive is
    # enriched into no event at all, and the fleet's mix of them varies from run to run.
    assert enricher["events"] > 1000

    scrapes = [(workdir / f"metrics-{p}.prom").read_text() for p in ("ingest", "enricher")]
    exported = exported_names(scrapes[0]) | exported_names(scrapes[1])
    missing = metrics_used() - exported
    assert not missing, f"the dashboard or alerts use metrics nobody exports: {missing}"
    # The running processes' types: rate() only over counters and histograms, and no
    # precomputed rate or quantile among the gauges.
    types = exported_types(scrapes[0]) | exported_types(scrapes[1])
    for expr in expressions():
        for name in rated_series(expr):
            assert types[name] in {"counter", "histogram"}, (name, expr)
    assert types["rpc_server_call_duration_seconds_count"] == "histogram"
    assert types["headwater_enricher_output_bytes_total"] == "counter"
    for name, kind in types.items():
        if kind == "gauge" and name.startswith("headwater_"):
            assert not any(w in name for w in ("per_second", "_rate", "latency")), name
