"""Redrive through a running enricher: a fixed cause ends ENRICHED, an unfixed one comes back.

A device without master data is dead-lettered after its retries; once master data exists,
redriving it produces the event and an ENRICHED completion (the redrive is not taken for
a duplicate, though its message id was seen). A poison payload redriven without a fix lands
in the dead letters again, once, with the redrive in its history: never a loop.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from headwater.ops import dlq
from headwater.proto.events.v1 import dead_letter_pb2, event_pb2
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
    start_enricher,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _letters(reader: TopicReader) -> list[dead_letter_pb2.DeadLetter]:
    return [dead_letter_pb2.DeadLetter.FromString(m.value()) for m in reader.records]


def test_redrive_round_trip_through_the_enricher(kafka_bootstrap: str, tmp_path: Path) -> None:
    topics = make_topics(kafka_bootstrap)
    orphan = Msg("m-orphan", "dev-new", ACME, acme(21.5, 40), 1)
    poison = Msg("m-poison", "dev-known", "application/x-unknown", b"\x00\x01", 1)
    master(kafka_bootstrap, topics, "dev-known")
    ingest(kafka_bootstrap, topics, [orphan, poison])

    enricher = start_enricher(
        kafka_bootstrap,
        topics,
        tmp_path,
        "enricher.log",
        TRIGGER_INTERVAL_SECONDS="0.2",
        MAX_ATTEMPTS="2",
        RETRY_BACKOFF_SECONDS="0.2",
    )
    done = TopicReader(kafka_bootstrap, topics.completions)
    letters = TopicReader(kafka_bootstrap, topics.deadletter)
    alive = lambda: enricher.poll() is None or pytest.fail("enricher exited early")  # noqa: E731

    def outcomes(message_id: str) -> list[str]:
        return [outcome(c) for c in completions(done.records) if c.message_id == message_id]

    try:
        done.until(
            lambda _: (
                outcomes("m-orphan")[-1:] == ["OUTCOME_DEAD_LETTERED"]
                and "OUTCOME_DEAD_LETTERED" in outcomes("m-poison")
            ),
            150,
            alive,
        )
        letters.until(lambda r: len(r) == 2, 30, alive)
        assert {d.message_id: d.reason for d in _letters(letters)} == {
            "m-orphan": "MASTER_DATA_MISSING",
            "m-poison": "UNKNOWN_FORMAT",
        }

        # The operator adds the missing master data, then redrives both.
        master(kafka_bootstrap, topics, "dev-new")
        chosen = [
            r for r in dlq.read_dead_letters(kafka_bootstrap, topics.deadletter) if r.offset >= 0
        ]
        sent = list(
            dlq.redrive(
                kafka_bootstrap,
                chosen,
                by="oncall",
                why="master data for dev-new added",
                dry_run=False,
                ingest_topics=topics.ingest,
            )
        )
        assert [r.sent for r in sent] == [True, True]

        done.until(lambda _: "OUTCOME_ENRICHED" in outcomes("m-orphan"), 90, alive)
        letters.until(lambda r: len(r) == 3, 60, alive)
        events = TopicReader(kafka_bootstrap, topics.event_topic("telemetry"))
        enriched = next(
            c
            for c in completions(done.records)
            if c.message_id == "m-orphan" and outcome(c) == "OUTCOME_ENRICHED"
        )
        events.until(
            lambda r: any(
                event_pb2.Event.FromString(m.value()).event_id == enriched.events[0].event_id
                for m in r
            ),
            30,
        )
        events.close()
    finally:
        os.killpg(enricher.pid, signal.SIGTERM)
        enricher.wait(60)
        done.close()

    again = _letters(letters)[2]
    assert again.message_id == "m-poison"
    assert [(r.by, r.reason) for r in again.redrives] == [
        ("oncall", "master data for dev-new added")
    ]
    # Only the redriven poison came back: nothing loops.
    letters.poll(2.0)
    assert len(letters.records) == 3
    letters.close()
