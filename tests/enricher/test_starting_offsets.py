"""Starting offsets on Spark's Kafka source: ``latest`` skips the ingest backlog, never master data.

A new checkpoint started with ``latest`` must not process what was in the ingest topics
before it started, while the master-data source still reads its compacted topic from the
beginning: a device registered long ago is enriched, not parked as MASTER_DATA_MISSING.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from headwater.enricher.driver import job
from headwater.enricher.driver.settings import EnricherSettings
from headwater.kafka.settings import KafkaSettings
from tests.support.kafkatools import (
    ACME,
    TERMINAL,
    Msg,
    TopicReader,
    acme,
    completions,
    ingest,
    make_topics,
    master,
    outcome,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_latest_skips_the_ingest_backlog_but_reads_all_master_data(
    spark, kafka_bootstrap: str, tmp_path: Path
) -> None:
    topics = make_topics(kafka_bootstrap, partitions=1)
    master(kafka_bootstrap, topics, "dev-1")  # long before the query starts
    old = [Msg(f"old-{i}", "dev-1", ACME, acme(i, i), i + 1) for i in range(3)]
    ingest(kafka_bootstrap, topics, old)
    settings = EnricherSettings(
        checkpoint_location=str(tmp_path / "cp"),
        starting_offsets="latest",
        trigger_interval_seconds=0.2,
        topics=topics,
        kafka=KafkaSettings(bootstrap_servers=kafka_bootstrap),
    )
    query = job.start(spark, settings, str(tmp_path / "stats.jsonl"))
    reader = TopicReader(kafka_bootstrap, topics.completions)
    try:
        # "latest" is fixed when the first batch is planned: produce only after it ran.
        deadline = time.monotonic() + 90
        while not query.recentProgress and time.monotonic() < deadline:
            query.awaitTermination(0.2)
        assert query.recentProgress, "the query ran no batch"
        new = [Msg(f"new-{i}", "dev-1", ACME, acme(i, i), 10 + i) for i in range(2)]
        ingest(kafka_bootstrap, topics, new)
        wanted = {m.message_id for m in new}

        def done(records: list) -> bool:
            ended = {c.message_id for c in completions(records) if outcome(c) in TERMINAL}
            return wanted <= ended

        reader.until(done, 90, lambda: query.isActive or pytest.fail(str(query.exception())))
        reader.poll(1.0)
        by_id = {c.message_id: outcome(c) for c in completions(reader.records)}
        assert {mid: by_id[mid] for mid in wanted} == dict.fromkeys(wanted, "OUTCOME_ENRICHED")
        assert not {m.message_id for m in old} & by_id.keys(), "the backlog was processed"
    finally:
        query.stop()
        reader.close()
