"""The commands benchmark, small: every command delivered, and nothing logged that is not.

The bench used to start its gateways before its ingest server listened: every gateway's
first calls and streams failed (connection refused) and the run printed dozens of "ingest
call failed" and "command stream ended" warnings before measuring anything, hiding any
that mattered.
"""

from __future__ import annotations

import logging

import pytest

from headwater_dev.bench import command_bench


def test_bench_delivers_everything_without_warnings(
    kafka_bootstrap: str, reports_topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="headwater.gateway")
    figures = command_bench.run(50, 1.0, 20, 2, kafka_bootstrap)

    assert figures["written"] == 50
    for stage in ("stored", "delivered_written", "executed_written"):
        assert figures[stage]["count"] == 50, stage
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == []


def test_bench_offline_phase_checks_order_expiry_and_loss(
    kafka_bootstrap: str, reports_topic: str
) -> None:
    # Issue 26's 10-minute gap runs as `headwater bench commands --offline-seconds 600`
    # (docs/benchmarks.md); here the same phase, 6 seconds long.
    figures = command_bench.run(20, 1.0, 20, 2, kafka_bootstrap, offline_seconds=6, offline_rate=20)

    offline = figures["offline"]
    assert offline["written"] == 60 and offline["expiring"] == 12
    assert offline["ran"] == 48
    assert (offline["lost"], offline["expired_but_ran"], offline["expired_without_status"]) == (
        0,
        0,
        0,
    )
    assert offline["out_of_order_devices"] == 0
