"""Retention deletes data under a stopped enricher: the restart fails loudly, a person recovers.

Apache Kafka's DeleteRecords moves the log start past offsets the checkpoint still needs,
exactly as time or size retention does. The restarted query must stop with a message that
tells the operator what happened and which command moves on; after
``headwater offsets checkpoint set-start --log-start --execute`` it resumes from the new
log start and the records that survived are enriched.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from headwater.enricher.driver.runner import run_enricher
from headwater.enricher.driver.settings import EnricherSettings
from headwater.kafka.settings import KafkaSettings
from tests.support.kafkatools import (
    ACME,
    TERMINAL,
    Msg,
    TopicReader,
    acme,
    committed_past,
    completions,
    ingest,
    make_topics,
    master,
    outcome,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def delete_records_before(bootstrap: str, topic: str, partition: int, offset: int) -> int:
    """Delete ``topic[partition]`` below ``offset`` (DeleteRecords); return the new start."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.delete_records([TopicPartition(topic, partition, offset)])
    deleted = next(iter(futures.values())).result(timeout=30)
    return int(deleted.low_watermark)


def test_retention_under_a_stopped_enricher_fails_loudly_and_set_start_recovers(
    spark, kafka_bootstrap: str, tmp_path: Path
) -> None:
    topics = make_topics(kafka_bootstrap, partitions=1)
    master(kafka_bootstrap, topics, "dev-1")
    telemetry = topics.ingest[0]
    checkpoint = str(tmp_path / "cp")
    settings = EnricherSettings(
        checkpoint_location=checkpoint,
        starting_offsets="earliest",
        trigger_interval_seconds=0.2,
        topics=topics,
        kafka=KafkaSettings(bootstrap_servers=kafka_bootstrap),
    )
    reader = TopicReader(kafka_bootstrap, topics.completions)
    first = [Msg(f"r{i}", "dev-1", ACME, acme(i, i), i + 1) for i in range(5)]
    ingest(kafka_bootstrap, topics, first)
    run_until(settings, reader, {m.message_id for m in first}, (telemetry, 5))

    # While the enricher is stopped: ten more records, of which retention takes the first six.
    later = [Msg(f"s{i}", "dev-1", ACME, acme(i, i), 10 + i) for i in range(10)]
    ingest(kafka_bootstrap, topics, later)
    log_start = delete_records_before(kafka_bootstrap, telemetry, 0, 5 + 6)
    assert log_start == 11

    restart = EnricherSettings(**{**settings.__dict__, "starting_offsets": ""})
    code, summary = run_enricher(restart, deadline=time.monotonic() + 120)
    assert code == 1, "the query must stop, not skip the deleted records"
    message = summary["error"]
    assert telemetry in message and "headwater offsets checkpoint set-start" in message, message

    command = ["offsets", "checkpoint", "set-start", "--checkpoint", checkpoint]
    command += ["--topic", telemetry, "--partition", "0", "--log-start", "--execute"]
    moved = subprocess.run(
        [sys.executable, "-m", "headwater.cli", *command, "--bootstrap-servers", kafka_bootstrap],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert moved.returncode == 0, moved.stderr
    survivors = {m.message_id for m in later[6:]}
    run_until(restart, reader, survivors, (telemetry, 15))
    terminal = {c.message_id for c in completions(reader.records) if outcome(c) in TERMINAL}
    assert terminal & {m.message_id for m in later[:6]} == set(), "deleted records came back"
    reader.close()


def run_until(
    settings: EnricherSettings, reader: TopicReader, wanted: set[str], committed: tuple[str, int]
) -> None:
    """Run the enricher until ``wanted`` completed and the checkpoint committed past them."""
    topic, end = committed

    def done() -> bool:
        reader.poll(0.2)
        ended = {c.message_id for c in completions(reader.records) if outcome(c) in TERMINAL}
        return wanted <= ended and committed_past(settings.checkpoint_location, topic, end)

    code, summary = run_enricher(settings, should_stop=done, deadline=time.monotonic() + 150)
    assert code == 0, summary
    assert done(), f"not every message completed: {summary}"
