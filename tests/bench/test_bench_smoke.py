"""The ingest benchmark runs end to end on a tiny load and reports every section."""

from __future__ import annotations

import json
import subprocess
import sys


def test_bench_ingest_smoke():
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "headwater.cli",
            "bench",
            "ingest",
            "--single-messages",
            "200",
            "--batch-messages",
            "1000",
            "--payload-sizes",
            "200",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    scenarios = {r["scenario"].split(",")[0].split(" (")[0] for r in report["results"]}
    assert scenarios == {
        "raw aiokafka producer",
        "raw confluent-kafka producer",
        "bare grpc echo",
        "ingest single-message",
        "ingest batch of 100",
        "ingest streams",
    }
    assert all(r["failed"] == 0 and r["msgs_per_s"] > 0 for r in report["results"])
    assert {t["target"].split(" ")[0] for t in report["targets"]} >= {"single-message", "batch"}
    assert report["server_peak_rss_mb"] > 0
