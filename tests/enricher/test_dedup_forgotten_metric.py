"""End to end (real broker, local Spark): the dedup ids the bounds forget are a metric.

One device sends 40 messages in one batch past bounds set small (10 recent ids, 5 per
device-time hour): the oldest 31 leave the recent tier early for their hour, which keeps
the last 5 filed, so 26 are forgotten. The driver's listener reads the operator's
accumulator after the batch and exports the count as
``headwater_enricher_dedup_ids_forgotten_total``; a resend of a forgotten id is enriched
again, one still remembered is a duplicate.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from headwater.enricher.driver.metrics import EnricherListener
from headwater.enricher.state import jvm_state
from tests.support.enricher import alive, settings_for
from tests.support.kafkatools import (
    ACME,
    Msg,
    TopicReader,
    acme,
    completions,
    ingest,
    make_topics,
    master,
    outcome,
)

pytestmark = [pytest.mark.spark]

SENT, MAX_RECENT, MAX_PER_HOUR = 40, 10, 5
#: Moved early: all but the recent tier's low mark (a sixth below its bound); of those the
#: hour keeps its bound.
FORGOTTEN = (SENT - (MAX_RECENT - MAX_RECENT // 6)) - MAX_PER_HOUR


def _forgotten(reader: InMemoryMetricReader) -> float | None:
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data else []:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                if m.name == "headwater.enricher.dedup.ids_forgotten":
                    return sum(p.value for p in m.data.data_points)
    return None


def test_ids_the_dedup_bounds_forget_are_counted_by_the_driver_metric(
    kafka_bootstrap: str, spark: Any, running, tmp_path: Path
) -> None:
    topics = make_topics(kafka_bootstrap)
    master(kafka_bootstrap, topics, "dev-1")
    now = int(time.time() * 1000)
    hour = now - now % 3_600_000  # one device-time hour for all, a plausible one
    msgs = [Msg(f"m{i}", "dev-1", ACME, acme(i, i), i, hour + i) for i in range(1, SENT + 1)]
    ingest(kafka_bootstrap, topics, msgs)  # before the query starts: one batch

    metrics = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[metrics])
    stats = tmp_path / "stats.jsonl"  # the path the `running` fixture gives the sink
    listener = EnricherListener(provider.get_meter("t"), str(stats), jvm_state.ids_forgotten(spark))
    assert _forgotten(metrics) == 0  # exported from the start
    spark.streams.addListener(listener)
    try:
        q = running(
            settings_for(
                kafka_bootstrap,
                topics,
                str(tmp_path / "cp"),
                dedup_max_recent_ids=MAX_RECENT,
                dedup_max_ids_per_hour=MAX_PER_HOUR,
            )
        )
        reader = TopicReader(kafka_bootstrap, topics.completions)
        reader.until(lambda r: len(completions(r)) >= SENT, 120, alive(q))
        deadline = time.monotonic() + 60  # the progress event follows the batch's output
        while _forgotten(metrics) != FORGOTTEN and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _forgotten(metrics) == FORGOTTEN == 26

        # m1 was forgotten (the oldest filed into the hour): enriched again; m40 is recent.
        ingest(kafka_bootstrap, topics, [msgs[0], msgs[-1]])
        reader.until(lambda r: len(completions(r)) >= SENT + 2, 60, alive(q))
        again = {c.message_id: outcome(c) for c in completions(reader.records)[SENT:]}
        assert again == {"m1": "OUTCOME_ENRICHED", "m40": "OUTCOME_DUPLICATE"}
        reader.close()
    finally:
        spark.streams.removeListener(listener)
        provider.shutdown()
