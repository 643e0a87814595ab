"""The log lines that say where the enricher's (re)start spent its time."""

from __future__ import annotations

import logging
import uuid

import pytest
from pyspark.sql.streaming.listener import QueryProgressEvent, QueryStartedEvent

from headwater.enricher.driver.milestones import StartMilestones

QUERY, RUN = str(uuid.uuid4()), str(uuid.uuid4())


def _progress(batch: int, rows: int, end: int, latest: int | None) -> QueryProgressEvent:
    """A progress event as Spark sends it: the Kafka source read to ``end`` of ``latest``.

    ``latest`` None: the source did not say (no lag known, so not caught up).
    """
    source = {
        "description": "KafkaV2[Subscribe[ingest.telemetry.v1]]",
        "startOffset": {"ingest.telemetry.v1": {"0": end - rows}},
        "endOffset": {"ingest.telemetry.v1": {"0": end}},
        "latestOffset": None if latest is None else {"ingest.telemetry.v1": {"0": latest}},
        "numInputRows": rows,
        "inputRowsPerSecond": 0.0,
        "processedRowsPerSecond": 0.0,
    }
    progress = {
        "id": QUERY,
        "runId": RUN,
        "name": None,
        "timestamp": "2026-11-28T02:00:00.000Z",
        "batchId": batch,
        "batchDuration": 900,
        "durationMs": {"addBatch": 800, "triggerExecution": 900},
        "stateOperators": [],
        "sources": [source],
        "sink": {"description": "headwater-kafka", "numOutputRows": rows},
        "numInputRows": rows,
    }
    return QueryProgressEvent.fromJson({"progress": progress})


def _started() -> QueryStartedEvent:
    return QueryStartedEvent.fromJson(
        {"id": QUERY, "runId": RUN, "name": None, "timestamp": "2026-11-28T02:00:00.000Z"}
    )


def test_each_start_logs_its_first_batch_and_when_it_caught_up(
    caplog: pytest.LogCaptureFixture,
) -> None:
    milestones = StartMilestones()
    caplog.set_level(logging.INFO, logger="headwater.enricher.driver.milestones")
    milestones.onQueryStarted(_started())
    milestones.onQueryProgress(_progress(12, 500, 500, 1_800))  # a backlog behind it
    milestones.onQueryProgress(_progress(12, 0, 500, None))  # no lag known: not caught up
    milestones.onQueryProgress(_progress(13, 500, 1_000, 1_900))
    milestones.onQueryProgress(_progress(14, 900, 1_900, 1_900))  # nothing left
    milestones.onQueryProgress(_progress(15, 10, 1_910, 1_910))
    milestones.onQueryStarted(_started())  # the query started again: milestones anew
    milestones.onQueryProgress(_progress(16, 5, 1_915, 1_915))
    lines = [(r.getMessage(), getattr(r, "batch", None)) for r in caplog.records]
    assert lines == [
        ("query started", None),
        ("first micro-batch done", 12),
        ("caught up", 14),
        ("query started", None),
        ("first micro-batch done", 16),
        ("caught up", 16),
    ]
    first = caplog.records[1]
    assert (first.rows, first.duration_ms) == (500, {"addBatch": 800, "triggerExecution": 900})
    assert caplog.records[2].since_query_start_s >= 0
    assert caplog.records[0].run_id == RUN
