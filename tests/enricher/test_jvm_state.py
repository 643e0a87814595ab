"""The JVM keyed state (jvm/enricher-state) against today's Python operator, on real local Spark.

The difference test runs one recorded corpus (tests/enricher/corpus.py) through both and
requires the same events, completions, dead letters, parked records and snapshots, field by
field, ids included. Only the times taken from the micro-batch clock differ between two runs
(completed, dead-lettered, not-before, updated), so they are compared as "set" or "unset".
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException

from headwater.enricher.driver import jvm_state
from headwater.enricher.driver.errors import STATE_REFUSALS, explain_failure
from headwater.enricher.driver.settings import EnricherTopics
from headwater.enricher.executor.decode import key_columns
from headwater.enricher.python_operator.state import Policy, process_devices
from headwater.proto.events.v1 import (
    completion_pb2,
    dead_letter_pb2,
    device_state_pb2,
    event_pb2,
    parked_message_pb2,
)
from tests.enricher.corpus import RAW, corpus
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
    read_all,
)

T = EnricherTopics.with_prefix("d.")
POLICY = Policy(T, 3, 1000, 10_000, 60_000)
#: role -> (message type, the field that holds the batch time).
CLOCKED = {
    "completion": (completion_pb2.Completion, "completed_time"),
    "deadletter": (dead_letter_pb2.DeadLetter, "dead_lettered_time"),
    "retry": (parked_message_pb2.ParkedMessage, "not_before"),
    "state": (device_state_pb2.DeviceState, "updated_time"),
    "event": (event_pb2.Event, None),
}


def comparable(row: Any) -> tuple:
    """Return an output row with the batch-clock times replaced by whether they were set."""
    kind, clock = CLOCKED[row.role]
    msg = kind.FromString(row.value)
    if clock is not None:
        assert msg.HasField(clock)
        msg.ClearField(clock)
    headers = tuple((h.key, bytes(h.value)) for h in row.headers)
    return (
        row.topic,
        bytes(row.key),
        row.role,
        row.label,
        row.ref,
        row.event_id,
        row.received_ms,
        row.batch_ms is not None,
        headers,
        msg.SerializeToString(deterministic=True),
    )


def _events_in_order(rows: list[Any]) -> dict[bytes, list[str]]:
    order: dict[bytes, list[str]] = {}
    for r in rows:
        if r.role == "event":
            order.setdefault(bytes(r.key), []).append(r.event_id)
    return order


@pytest.mark.spark
def test_the_jvm_operator_writes_what_the_python_operator_writes(spark) -> None:
    raw = spark.createDataFrame(corpus(T.ingest, T.master), RAW)
    python = process_devices(key_columns(raw, T.master), POLICY).collect()
    jvm = jvm_state.process_devices(raw, POLICY).collect()
    assert Counter(r.role for r in python) == Counter(r.role for r in jvm)
    want, got = Counter(map(comparable, python)), Counter(map(comparable, jvm))
    missing, extra = want - got, got - want
    assert not missing and not extra, _explain(missing, extra)
    assert _events_in_order(python) == _events_in_order(jvm)
    # The corpus reaches every outcome, or the comparison would prove less than it says.
    labels = {r.label for r in python if r.role == "completion"}
    assert labels == {"ENRICHED", "DUPLICATE", "DEAD_LETTERED", "RETRY_SCHEDULED"}
    reasons = {r.label for r in python if r.role == "deadletter"}
    assert {"PAYLOAD_INVALID", "UNIT_UNKNOWN", "ENVELOPE_INVALID", "UNKNOWN_FORMAT"} <= reasons


def _explain(missing: Counter, extra: Counter) -> str:
    lines = ["python only:"] + [f"  {m}" for m in list(missing)[:5]]
    lines += ["jvm only:"] + [f"  {m}" for m in list(extra)[:5]]
    return "\n".join(lines)


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


@pytest.mark.slow
@pytest.mark.spark
def test_a_checkpoint_of_the_other_operator_is_refused_at_start(
    kafka_bootstrap: str,
    running,
    tmp_path,
) -> None:
    """Switching operators on one checkpoint must stop the query, never mix state layouts."""
    topics = make_topics(kafka_bootstrap, partitions=1)
    master(kafka_bootstrap, topics, "dev-1")
    ingest(kafka_bootstrap, topics, [Msg("c1", "dev-1", ACME, acme(1, 2), 1)])
    checkpoint = str(tmp_path / "cp")
    reader = TopicReader(kafka_bootstrap, topics.completions)
    first = running(settings_for(kafka_bootstrap, topics, checkpoint, state_operator="python"))
    reader.until(lambda r: len(r) >= 1, 90, alive(first))
    reader.close()
    first.stop()
    ingest(kafka_bootstrap, topics, [Msg("c2", "dev-1", ACME, acme(1, 2), 2)])
    second = running(settings_for(kafka_bootstrap, topics, checkpoint, state_operator="jvm"))
    with pytest.raises(StreamingQueryException) as refused:
        second.awaitTermination(120)
    # The operator is told what happened and what to do (errors.explain_failure).
    explained = explain_failure(str(refused.value))
    assert explained.startswith("the checkpoint holds state in another layout"), explained
    # Which refusal Spark reports first depends on the checkpoint's state metadata.
    assert any(code in explained for code in STATE_REFUSALS), explained
    assert "c2" not in {c.message_id for c in completions(reader_after(kafka_bootstrap, topics))}


def reader_after(bootstrap: str, topics: EnricherTopics) -> list[Any]:
    """Return every record of the completions topic."""
    return read_all(bootstrap, topics.completions)
