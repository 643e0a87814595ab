"""End to end (real broker, local Spark): one message cannot hold back the others (issues 22, 35).

A Globex message whose unit is ``m**9**9**9`` (an exponent tower the units library would
evaluate forever), a Sparkplug B birth of exactly the ingest contract's payload limit
(256 KiB, ~12,000 metrics: over the metric cap), four births of 4,500 metrics each with a
different valid unit (seconds of the units library's CPU each; issue 35's four) and Globex
readings in logarithmic units (once converted as linear ones) go through a running enricher.
Each must become a dead letter with its own reason, and the messages other devices sent
right after them must be completed in the same micro-batch or the next.
``HEADWATER_TEST_UNITS_SCALE=10`` sends ten times as many births and log-unit readings (issue
35's 10x target).
"""

from __future__ import annotations

import os
import time

import pytest
from confluent_kafka import Consumer, TopicPartition

from headwater.enricher.hop.budget import Budget
from headwater.proto.events.v1 import dead_letter_pb2
from headwater.proto.sparkplug.v1 import sparkplug_b_pb2 as spb
from headwater_dev.bench.enricher.units import distinct_units_birth
from tests.support.enricher import alive, settings_for, spark_memory
from tests.support.kafkatools import (
    ACME,
    GLOBEX,
    Msg,
    TopicReader,
    acme,
    completions,
    ingest,
    make_topics,
    masters,
    outcome,
    read_all,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SPARKPLUG_BIRTH = "application/vnd.eclipse.sparkplug.b+protobuf; message-type=DBIRTH"
#: The ingest contract's largest payload (services/ingest/settings.py).
CONTRACT_MAX_PAYLOAD_BYTES = 262_144
OTHERS = 20
#: Births of new units (four held every device for 24.8 s in issue 35).
UNIT_BIRTHS = 4 * int(os.environ.get("HEADWATER_TEST_UNITS_SCALE", "1"))
#: Issue 35's wrong values: logarithmic units (and a run of %), each refused, never converted.
LOG_UNITS = ["dBm", "dBW", "dB", "decade", "%%"] * int(
    os.environ.get("HEADWATER_TEST_UNITS_SCALE", "1")
)


def sparkplug_at_the_limit(size: int = CONTRACT_MAX_PAYLOAD_BYTES) -> bytes:
    """A birth of as many small metrics as fit, padded to exactly ``size`` bytes."""
    p = spb.Payload(timestamp=1_700_000_000_000)
    i = 0
    while p.ByteSize() < size - 64:
        p.metrics.add(name=f"m{i}", datatype=10, double_value=float(i))
        i += 1
    p.body = b""
    # "body" (field 7, bytes) takes the rest: a tag byte, a varint length, the bytes.
    for pad in range(size - p.ByteSize(), 0, -1):
        p.body = b"x" * pad
        if p.ByteSize() <= size:
            break
    while p.ByteSize() < size:
        p.body += b"x"
    value = p.SerializeToString()
    assert len(value) == size, len(value)
    return value


def _high_watermarks(bootstrap: str, topic: str) -> dict[str, int]:
    """Return each partition's end offset of ``topic`` (keys as Spark's progress spells them)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "budget-e2e-marks"})
    try:
        parts = c.list_topics(topic, timeout=10).topics[topic].partitions
        return {
            str(p): c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts
        }
    finally:
        c.close()


@pytest.mark.timeout(400)
def test_a_unit_tower_a_sparkplug_payload_at_the_limit_and_a_birth_of_new_units_hold_no_one_back(
    kafka_bootstrap: str, spark, running, progress_log, tmp_path
) -> None:
    topics = make_topics(kafka_bootstrap)
    births = [f"units-{b}" for b in range(UNIT_BIRTHS)]
    devices = ["dev-tower", "dev-spb", "dev-log", *births, *(f"dev-{i}" for i in range(OTHERS))]
    masters(kafka_bootstrap, topics, devices)
    # The enricher runs, warm (its Python workers have normalized a message), before the
    # poison arrives: what follows shows how long the poison holds the others.
    ingest(kafka_bootstrap, topics, [Msg("warm", "dev-0", ACME, acme(1, 2), 1)])
    q = running(settings_for(kafka_bootstrap, topics, str(tmp_path / "cp")))
    reader = TopicReader(kafka_bootstrap, topics.completions)
    reader.until(lambda r: any(c.message_id == "warm" for c in completions(r)), 180, alive(q))
    first = _high_watermarks(kafka_bootstrap, topics.ingest[0])
    warm = spark_memory(spark)

    tower = b'{"readings": [{"k": "length", "v": 1, "u": "m**9**9**9"}]}'
    spb_payload = sparkplug_at_the_limit()
    poison = [
        Msg("p-tower", "dev-tower", GLOBEX, tower, 1),
        Msg("p-sparkplug", "dev-spb", SPARKPLUG_BIRTH, spb_payload, 1),
        *(
            Msg(f"p-{d}", d, SPARKPLUG_BIRTH, distinct_units_birth(4_500, salt=1 + b), 1)
            for b, d in enumerate(births)
        ),
        *(
            Msg(
                f"p-log-{i}",
                "dev-log",
                GLOBEX,
                b'{"readings": [{"k": "p", "v": 30, "u": "%s"}]}' % unit.encode(),
                1 + i,
            )
            for i, unit in enumerate(LOG_UNITS)
        ),
    ]
    after = [Msg(f"ok-{i}", f"dev-{i}", ACME, acme(i, i), 2) for i in range(OTHERS)]
    sent = time.monotonic()
    ingest(kafka_bootstrap, topics, poison + after)
    last = _high_watermarks(kafka_bootstrap, topics.ingest[0])

    wanted = {m.message_id for m in poison + after}
    reader.until(lambda r: wanted <= {c.message_id for c in completions(r)}, 120, alive(q))
    print(
        f"poison ({UNIT_BIRTHS} births of new units) and {OTHERS} others: all completed "
        f"{time.monotonic() - sent:.1f} s after sending; memory before {warm}, "
        f"after {spark_memory(spark)}"
    )
    by_id = {c.message_id: c for c in completions(reader.records)}
    assert outcome(by_id["p-tower"]) == "OUTCOME_DEAD_LETTERED"
    assert outcome(by_id["p-sparkplug"]) == "OUTCOME_DEAD_LETTERED"
    assert all(outcome(by_id[f"p-{d}"]) == "OUTCOME_DEAD_LETTERED" for d in births)
    assert all(
        outcome(by_id[f"p-log-{i}"]) == "OUTCOME_DEAD_LETTERED" for i in range(len(LOG_UNITS))
    )
    assert all(outcome(by_id[m.message_id]) == "OUTCOME_ENRICHED" for m in after)
    # Within a micro-batch or two of the poison: the batches that read any of them.
    used = progress_log.batches_reading(topics.ingest[0], first, last)
    assert 1 <= len(used) <= 2, used
    assert q.exception() is None and q.isActive

    letters = {
        d.message_id: d
        for d in (
            dead_letter_pb2.DeadLetter.FromString(m.value())
            for m in read_all(kafka_bootstrap, topics.deadletter)
        )
    }
    assert (letters["p-tower"].reason, letters["p-tower"].stage) == ("UNIT_UNKNOWN", "normalize")
    assert "stacked exponents" in letters["p-tower"].error_message
    assert letters["p-sparkplug"].reason == "SPARKPLUG_LIMIT"
    assert (
        f"over the cap of {Budget().sparkplug_max_metrics}" in letters["p-sparkplug"].error_message
    )
    for d in births:
        assert letters[f"p-{d}"].reason == "NORMALIZE_BUDGET"
        assert "(unit conversions included)" in letters[f"p-{d}"].error_message
    for i, unit in enumerate(LOG_UNITS):
        letter = letters[f"p-log-{i}"]
        assert (letter.reason, letter.stage) == ("UNIT_UNKNOWN", "normalize")
        assert f"unit '{unit}'" in letter.error_message
        assert "logarithmic: not converted" in letter.error_message or unit == "%%"
    reader.close()
