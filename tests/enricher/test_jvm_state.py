"""The JVM keyed state (jvm/enricher-state) through py4j, on real local Spark.

A recorded corpus (tests/enricher/corpus.py: the dev fleet's mix and the formats' edge cases)
runs through the operator: every ingest record gets one completion and the corpus reaches
every outcome. The rules themselves are tested in the operator's JUnit tests
(tests/enricher/test_jvm_unit.py runs them) and end to end in the guarantee tests.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, Row
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

from headwater.enricher.driver import job
from headwater.enricher.driver.settings import EnricherSettings
from headwater.enricher.errors import STATE_REFUSALS, explain_failure
from headwater.enricher.hop.schema import OUTPUT
from headwater.enricher.source.keys import key_columns
from headwater.enricher.state import jvm_state
from headwater.enricher.state.policy import Policy
from headwater.enricher.topics import EnricherTopics
from tests.enricher.corpus import RAW, T0, Corpus, corpus
from tests.support.enricher import settings_for
from tests.support.kafkatools import (
    ACME,
    Msg,
    acme,
    completions,
    ingest,
    make_topics,
    master,
    read_all,
)

T = EnricherTopics.with_prefix("d.")
POLICY = Policy(T, 3, 1000, 10_000, 60_000)


@pytest.mark.spark
def test_the_corpus_completes_each_ingest_record_once_and_reaches_every_outcome(spark) -> None:
    rows = corpus(T.ingest, T.master)
    out = jvm_state.process_devices(spark.createDataFrame(rows, RAW), POLICY).collect()
    done = [r for r in out if r.role == "completion"]
    ingest_refs = Counter(f"{r[2]}/{r[3]}/{r[4]}" for r in rows if r[2] != T.master)
    assert Counter(r.ref for r in done) == ingest_refs
    assert {r.label for r in done} == {"ENRICHED", "DUPLICATE", "DEAD_LETTERED", "RETRY_SCHEDULED"}
    reasons = {r.label for r in out if r.role == "deadletter"}
    assert {"PAYLOAD_INVALID", "UNIT_UNKNOWN", "ENVELOPE_INVALID", "UNKNOWN_FORMAT"} <= reasons
    assert {r.role for r in out} == {"event", "completion", "deadletter", "retry", "state"}


@pytest.mark.spark
def test_a_missing_operator_jar_is_named_with_the_fix(spark, monkeypatch) -> None:
    monkeypatch.setattr(jvm_state, "ENTRY", "io.headwater.enricher.state.NoSuchClass")
    raw = spark.createDataFrame([], RAW)
    with pytest.raises(jvm_state.StateOperatorMissingError, match="make install"):
        jvm_state.process_devices(raw, POLICY)


def test_the_policy_crosses_as_lines_the_jvm_reads() -> None:
    lines = jvm_state.policy_lines(POLICY).splitlines()
    assert "topic.event.telemetry=d.events.telemetry.v1" in lines
    assert "dedup_horizon_ms=608400000" in lines
    assert "max_attempts=3" in lines
    assert f"max_parked_bytes={32 << 20}" in lines
    assert "dedup_max_recent_ids=50000" in lines
    assert "dedup_max_ids_per_hour=50000" in lines


def test_the_settings_reach_the_policy() -> None:
    settings = EnricherSettings(topics=T, dedup_max_recent_ids=7, dedup_max_ids_per_hour=9)
    lines = jvm_state.policy_lines(job.policy_of(settings)).splitlines()
    assert {"dedup_max_recent_ids=7", "dedup_max_ids_per_hour=9"} <= set(lines)


@pytest.mark.spark
def test_a_device_past_its_parked_bytes_is_dead_lettered_and_others_go_on(spark) -> None:
    # Issue 35 at a small scale: 20 valid acme messages of 20 KB for a device without master
    # data, the limit lowered by the setting to 100 KB; another device runs beside it.
    settings = EnricherSettings(topics=T, max_attempts=3, max_parked_bytes=100_000)
    c = Corpus(T.ingest, T.master)
    c.master("other")
    pad = "x" * 20_000
    for s in range(1, 21):
        big = json.dumps({"temp_c": 20.0, "hum_pct": 40.0, "pad": pad}).encode()
        c.message(Msg(f"big-{s}", "big", ACME, big, sequence=s, device_time_ms=T0 + s))
        c.message(Msg(f"other-{s}", "other", ACME, acme(21.0, 41.0), s, T0 + s))
    out = jvm_state.process_devices(
        spark.createDataFrame(c.rows, RAW), job.policy_of(settings)
    ).collect()
    ids = {f"{r[2]}/{r[3]}/{r[4]}": r[7][0][1].decode() for r in c.rows[1:]}  # ref -> id
    done = [r for r in out if r.role == "completion"]
    assert Counter(r.ref for r in done) == Counter(ids.keys()), "one completion per input"
    outcome = {ids[r.ref]: r.label for r in done}
    assert all(outcome[f"other-{s}"] == "ENRICHED" for s in range(1, 21))
    parked = [s for s in range(1, 21) if outcome[f"big-{s}"] == "RETRY_SCHEDULED"]
    assert parked == [1, 2, 3, 4], "as many as fit in 100 KB, the oldest"
    dead = [s for s in range(1, 21) if outcome[f"big-{s}"] == "DEAD_LETTERED"]
    assert dead == list(range(5, 21)), "the newest are dead letters"
    letters = [r for r in out if r.role == "deadletter"]
    assert len(letters) == 16
    assert {r.label for r in letters} == {"PARKED_BYTES_LIMIT"}


class OtherLayout(StatefulProcessor):
    """Keyed state in another layout than the JVM operator's, as an earlier release's was."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.device = handle.getValueState("device", "seen long")

    def handleInputRows(
        self, key: Any, rows: Iterator[Row], timerValues: TimerValues
    ) -> Iterator[Row]:
        self.device.update((sum(1 for _ in rows),))
        return iter([])


def _other_layout(raw: DataFrame, settings: EnricherSettings) -> DataFrame:
    return (
        key_columns(raw, settings.topics.master)
        .groupBy("tenant", "device_key")
        .transformWithState(
            statefulProcessor=OtherLayout(),
            outputStructType=OUTPUT,
            outputMode="Append",
            timeMode="ProcessingTime",
        )
    )


def _rows_read(query: Any) -> int:
    return sum(p["numInputRows"] for p in query.recentProgress)


@pytest.mark.slow
@pytest.mark.spark
def test_a_checkpoint_of_another_state_layout_is_refused_at_start(
    spark, kafka_bootstrap: str, running, tmp_path
) -> None:
    """A checkpoint whose state another layout wrote must stop the query, never mix layouts."""
    topics = make_topics(kafka_bootstrap, partitions=1)
    master(kafka_bootstrap, topics, "dev-1")
    ingest(kafka_bootstrap, topics, [Msg("c1", "dev-1", ACME, acme(1, 2), 1)])
    checkpoint = str(tmp_path / "cp")
    settings = settings_for(kafka_bootstrap, topics, checkpoint)
    raw = job.read_ingest(spark, settings)
    first = job.write_stream(_other_layout(raw, settings), settings, str(tmp_path / "stats.jsonl"))
    try:
        # Both records (the master record and c1) went through the other layout's state.
        deadline = time.monotonic() + 120
        while _rows_read(first) < 2 and time.monotonic() < deadline:
            assert first.exception() is None, first.exception()
            time.sleep(0.5)
        assert _rows_read(first) >= 2
    finally:
        first.stop()
    ingest(kafka_bootstrap, topics, [Msg("c2", "dev-1", ACME, acme(1, 2), 2)])
    second = running(settings)
    with pytest.raises(StreamingQueryException) as refused:
        second.awaitTermination(120)
    # The operator is told what happened and what to do (errors.explain_failure).
    explained = explain_failure(str(refused.value))
    assert explained.startswith("the checkpoint holds state in another layout"), explained
    # Which refusal Spark reports first depends on the checkpoint's state metadata.
    assert any(code in explained for code in STATE_REFUSALS), explained
    written = completions(read_all(kafka_bootstrap, topics.completions))
    assert "c2" not in {c.message_id for c in written}
