"""Failures on purpose: SIGKILL mid-batch and restart; a checkpoint the log no longer matches."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException

from headwater.enricher.driver import job
from headwater.enricher.driver.settings import EnricherSettings
from headwater.enricher.errors import explain_failure
from headwater.kafka.admin import ensure_topics
from headwater.kafka.settings import KafkaSettings
from headwater.topics import TopicSpec
from headwater_dev.devstack.broker import EmbeddedBroker
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
    masters,
    outcome,
    start_enricher,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_sigkill_mid_batch_then_restart_gives_one_terminal_completion_each(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    topics = make_topics(kafka_bootstrap)
    masters(kafka_bootstrap, topics, [f"dev-{d}" for d in range(10)])
    msgs = [Msg(f"k{i}", f"dev-{i % 10}", ACME, acme(i, 50), i // 10 + 1) for i in range(150)]
    ingest(kafka_bootstrap, topics, msgs)
    settings = {"MAX_RECORDS_PER_TRIGGER": "25", "TRIGGER_INTERVAL_SECONDS": "0.1"}
    reader = TopicReader(kafka_bootstrap, topics.completions)
    first = start_enricher(kafka_bootstrap, topics, tmp_path, "first.log", **settings)
    try:
        reader.until(
            lambda r: len(r) >= 40, 150, lambda: first.poll() is None or pytest.fail("exited early")
        )
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(30)
    seen_before_kill = len(reader.records)
    assert seen_before_kill < len(msgs), "killed too late to be mid-stream"
    second = start_enricher(kafka_bootstrap, topics, tmp_path, "second.log", **settings)
    wanted = {m.message_id for m in msgs}
    try:
        done = lambda r: wanted <= {c.message_id for c in completions(r) if outcome(c) in TERMINAL}  # noqa: E731
        reader.until(done, 200, lambda: second.poll() is None or pytest.fail("restart exited"))
    finally:
        second.send_signal(signal.SIGTERM)  # graceful: stops the query, prints the summary
        out, _ = second.communicate(timeout=60)
        os.killpg(second.pid, signal.SIGKILL)  # whatever is left of the group
    reader.poll(1.0)
    distinct: dict[str, set[tuple[str, tuple[str, ...]]]] = {}
    for c in completions(reader.records):
        if outcome(c) in TERMINAL:
            distinct.setdefault(c.message_id, set()).add(
                (outcome(c), tuple(e.event_id for e in c.events))
            )
    assert {k: len(v) for k, v in distinct.items()} == dict.fromkeys(wanted, 1)
    assert second.returncode == 0
    # An operator reads JSON logs: every line on stderr is one, Spark's included.
    logged = (tmp_path / "second.log").read_text().splitlines()
    assert logged and all(json.loads(line) for line in logged if line.strip())
    summary = json.loads(out.decode().strip().splitlines()[-1])
    assert {
        "batches",
        "input_rows",
        "events",
        "completions",
        "dead_letters",
        "retries",
        "state_snapshots",
    } <= summary.keys()
    reader.close()


def test_checkpoint_beyond_the_log_fails_loudly(spark, tmp_path: Path) -> None:
    broker = EmbeddedBroker(log_path=tmp_path / "broker.log").start()
    try:
        bs = broker.bootstrap_servers
        topics = make_topics(bs, partitions=1)
        master(bs, topics, "dev-1")
        ingest(bs, topics, [Msg(f"g{i}", "dev-1", ACME, acme(i, i), i + 1) for i in range(6)])
        s = EnricherSettings(
            checkpoint_location=str(tmp_path / "cp"),
            starting_offsets="earliest",
            trigger_interval_seconds=0.2,
            topics=topics,
            kafka=KafkaSettings(bootstrap_servers=bs),
        )
        q = job.start(spark, s, str(tmp_path / "stats.jsonl"))
        reader = TopicReader(bs, topics.completions)
        reader.until(lambda r: len(r) >= 6, 90)
        reader.close()
        deadline = time.monotonic() + 60
        while not committed_past(s.checkpoint_location, topics.ingest[0], 6):
            assert time.monotonic() < deadline, "the batch was never committed"
            q.awaitTermination(0.2)
        q.stop()
        # The broker loses everything (as retention or a recreated topic would): the
        # checkpoint now points past the end of the new, shorter log.
        broker.stop()
        broker = EmbeddedBroker(port=broker.port, log_path=tmp_path / "broker2.log").start()
        make_topics_same = [*topics.ingest, topics.master, *topics.outputs()]
        ensure_topics(bs, [TopicSpec(n, 1, 1, {}) for n in make_topics_same])
        ingest(bs, topics, [Msg("g-new", "dev-1", ACME, acme(1, 1), 1)])
        q2 = job.start(spark, s, str(tmp_path / "stats.jsonl"))
        deadline = time.monotonic() + 90
        with pytest.raises(StreamingQueryException) as failed:
            while time.monotonic() < deadline:
                q2.awaitTermination(1)
        assert not q2.isActive, "the query must stop, not skip"
        message = explain_failure(str(failed.value))
        assert f"{topics.ingest[0]}[0]" in message, message[:500]
        assert "recreated or truncated" in message, message[:500]
        assert "headwater offsets checkpoint set-start" in message
        assert "HEADWATER_ENRICHER_STARTING_OFFSETS" in message
    finally:
        for query in spark.streams.active:  # a failed assertion must not leave one running
            query.stop()
        broker.stop()
