"""``headwater bench ingest`` runs end to end on a few hundred messages and reports it all.

Bounded in count and time; no timing assertions (speed is read from the printed numbers).
"""

from __future__ import annotations

import json
import subprocess
import sys

import grpc
import pytest

SCENARIOS = {
    "raw_aiokafka",
    "raw_aiokafka_bare",
    "raw_confluent",
    "echo_single",
    "echo_batch",
    "single",
    "batch",
    "stream",
}


def _bench(kafka_bootstrap: str, *args: str) -> dict:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "headwater.cli",
            "bench",
            "ingest",
            "--bootstrap",
            kafka_bootstrap,
            "--payload-sizes",
            "200",
            "--json",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "verdict" in result.stdout  # the printed targets table
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("writer", ["aiokafka", "confluent"])
def test_scenarios_report_every_section(kafka_bootstrap: str, writer: str) -> None:
    report = _bench(
        kafka_bootstrap,
        "--messages",
        "300",
        "--duration",
        "10",
        "--single-callers",
        "8",
        "--batch-callers",
        "2",
        "--streams",
        "2",
        "--writer",
        writer,
    )
    assert report["options"]["writer"] == writer
    assert report["machine_at_start"]["nproc"] >= 1
    # The server's gRPC is part of the result (its transport changes the overload figures).
    assert report["grpc"]["version"] == grpc.__version__
    rows = {r["key"]: r for r in report["results"]}
    assert set(rows) == SCENARIOS
    for row in rows.values():
        assert row["messages"] == 300, row
        assert row["failed"] == 0, row
        assert row["msgs_per_s"] > 0 and row["mb_per_s"] > 0, row
    for key in ("echo_single", "single", "batch", "stream"):
        assert 0 < rows[key]["p50_ms"] <= rows[key]["p99_ms"], rows[key]
    for key in ("single", "batch", "stream"):
        assert 10 < rows[key]["server_peak_rss_mb"] < 2000, rows[key]
    # Each process's CPU per message; the broker's is not measurable with --bootstrap.
    for row in rows.values():
        cpu = row["cpu_us_per_msg"]
        assert set(cpu) == {"load_gen", "broker", "echo", "server"}, row
        assert cpu["broker"] is None, row
    assert rows["single"]["cpu_us_per_msg"]["server"] > 0
    verdicts = {t["target"].split(" ")[0]: t["verdict"] for t in report["targets"]}
    assert {"single-message", "batch"} <= set(verdicts)
    assert {t["verdict"] for t in report["targets"]} <= {"met", "MISSED", "info"}


def test_overload_mode_reports_every_window_and_the_noisy_neighbour(kafka_bootstrap: str) -> None:
    report = _bench(kafka_bootstrap, "--duration", "1", "--overload-seconds", "2")
    # One run: the scenarios (the single-call verdict among them), then the overload.
    assert any(r["scenario"].startswith("ingest single-message") for r in report["results"])
    assert any(t["target"].startswith("single-message rate") for t in report["targets"])
    overload = report["overload"]
    assert overload["capacity_msgs_per_s"] > 0
    assert [w["factor"] for w in overload["windows"]] == [2.0, 10.0]
    for w in overload["windows"]:
        assert w["offered_msgs_per_s"] >= overload["capacity_msgs_per_s"]
        assert sum(w["codes"].values()) > 0
        assert w["rss_before_mb"] > 0 and w["rss_end_of_window_mb"] > 0
        assert len(w["rss_series_mb"]) >= 2
        assert 0 <= w["refused_exhausted_share"] <= 1
        # The load came from separate processes, and recovery was probed meanwhile.
        assert w["load_processes"] == 2 and w["offered_calls"] > 0
        assert w["answers_ok_after_s"] is not None and w["server_cpu_s"] > 0
    neighbour = overload["neighbour"]
    for phase in ("alone", "beside_noisy"):
        assert sum(neighbour[phase]["polite_codes"].values()) > 0
    # The noisy gateway was limited by its own quota, named in its refusals' code.
    assert neighbour["beside_noisy"]["noisy_codes"].get("RESOURCE_EXHAUSTED", 0) > 0
    # Overload as a gateway sees it: gateway-library clients with spools, 2x and 10x.
    gateways = overload["gateway_windows"]
    assert [g["factor"] for g in gateways] == [2.0, 10.0]
    for g in gateways:
        assert g["spooled"] > 0 and g["acked"] > 0
        assert g["lost"] == g["spooled"] - g["acked"] - g["rejected_for_good"] - g["still_spooled"]
        assert g["drain_s"] >= 0 and g["rss_before_mb"] > 0
        # The server's CPU in the window beside its CPU at capacity: a goodput below
        # capacity with the server far from a full core was the clients' machine.
        assert g["server_cpu_share"] > 0
    assert overload["capacity_server_cpu_share"] > 0
    assert len(report["targets"]) == 9 + 22  # one payload size's, then the overload's
    assert {t["verdict"] for t in report["targets"]} <= {"met", "MISSED", "info"}
