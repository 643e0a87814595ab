"""``python -m headwater_dev.bench.enricher.sink`` run tiny: its figures and its records.

No timing assertion: the figures must agree with each other, and what the benchmark says
it wrote must be in Kafka, each completion naming its event's coordinates.
"""

from __future__ import annotations

import gc
import json
import re
import statistics
import uuid

import pytest

from headwater.proto.events.v1 import event_pb2
from headwater_dev.bench.enricher import sink as bench_sink
from tests.support.kafkatools import completions, end_offsets, read_all


def _run(kafka_bootstrap: str, capsys: pytest.CaptureFixture[str], *args: str) -> tuple:
    prefix = f"t{uuid.uuid4().hex[:10]}."
    argv = ["--messages", "300", "--devices", "20", "--rounds", "2", "--batch", "128"]
    try:
        assert (
            bench_sink.main([*argv, "--bootstrap", kafka_bootstrap, "--prefix", prefix, *args]) == 0
        )
    finally:
        gc.unfreeze()  # the sink froze the survivors; the suite runs with an ordinary collector
    *rounds, last = capsys.readouterr().out.strip().splitlines()
    return [re.search(r"CPU ([\d.]+) µs a message", line) for line in rounds], json.loads(last)


def test_the_sink_bench_prints_each_round_and_the_median_and_the_records_are_in_kafka(
    kafka_bootstrap: str, capsys: pytest.CaptureFixture[str]
) -> None:
    found, summary = _run(kafka_bootstrap, capsys)
    per_round = [float(m.group(1)) for m in found if m]
    assert len(per_round) == 2 and all(c > 0 for c in per_round)
    assert summary["rounds_cpu_us_per_message"] == per_round
    assert summary["cpu_us_per_message"] == pytest.approx(statistics.median(per_round), abs=0.1)
    # A task of 300 messages of 20 devices: an event and a completion each, a snapshot each device.
    assert (summary["messages"], summary["records"]) == (300, 620)
    written = summary["written"]
    assert sum(written.values()) == 100 + 2 * 620  # the warm-up's first 100 rows, two rounds
    for topic, n in written.items():
        assert sum(end_offsets(kafka_bootstrap, topic).values()) == n, topic
    events_topic = next(t for t in written if t.endswith("events.telemetry.v1"))
    events = {
        (m.partition(), m.offset()): event_pb2.Event.FromString(m.value())
        for m in read_all(kafka_bootstrap, events_topic)
    }
    completions_topic = next(t for t in written if t.endswith("completions.v1"))
    done = completions(read_all(kafka_bootstrap, completions_topic))
    assert len(done) == written[completions_topic]
    for c in done[-300:]:  # a round's: one ref each, to the event of the same message
        (ref,) = c.events
        event = events[(ref.partition, ref.offset)]
        assert (ref.topic, ref.event_id, event.message_id) == (
            events_topic,
            event.event_id,
            c.message_id,
        )


def test_the_floor_shape_writes_a_completion_a_message(
    kafka_bootstrap: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _found, summary = _run(kafka_bootstrap, capsys, "--shape", "floor")
    assert (summary["records"], list(summary["written"].values())) == (300, [100 + 2 * 300])
