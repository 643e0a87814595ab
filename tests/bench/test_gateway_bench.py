"""``headwater bench gateway`` runs end to end on a few hundred messages and reports it all."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def test_gateway_bench_reports_every_scenario(kafka_bootstrap: str) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "headwater.cli",
            "bench",
            "gateway",
            "--messages",
            "600",
            "--bootstrap",
            kafka_bootstrap,
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=True,
    )
    report = json.loads(out.stdout.strip().splitlines()[-1])
    rates = report["msgs_per_s"]
    assert set(rates) == {
        "direct (no spool)",
        "spooled, FULL, enqueue in batches",
        "enqueue only, FULL, one per transaction",
        "enqueue only, FULL, 100 per transaction",
        "enqueue only, NORMAL, one per transaction",
        "enqueue only, NORMAL, 100 per transaction",
    }
    assert all(v > 0 for v in rates.values()), rates
    ratio = rates["spooled, FULL, enqueue in batches"] / rates["direct (no spool)"]
    assert report["spooled_vs_direct"] == pytest.approx(ratio, rel=0.01)
