"""The README's run command with the enricher: every message ends in a completion, and the
dashboard and alerts of the chart use only metrics the running services export."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helm.monitoring import exported_names, metrics_used

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

    exported = exported_names((workdir / "metrics-ingest.prom").read_text()) | exported_names(
        (workdir / "metrics-enricher.prom").read_text()
    )
    missing = metrics_used() - exported
    assert not missing, f"the dashboard or alerts use metrics nobody exports: {missing}"
