"""The commands benchmark, small: every command delivered, and nothing logged that is not.

The bench used to start its gateways before its ingest server listened: every gateway's
first calls and streams failed (connection refused) and the run printed dozens of "ingest
call failed" and "command stream ended" warnings before measuring anything, hiding any
that mattered.
"""

from __future__ import annotations

import logging

import pytest

from headwater.bench import command_bench


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
