"""End to end (real broker, local Spark): readings whose unit is 200 KB of random hex (issue 35).

Issue 35's fourth input: Globex readings whose unit is 200 KB of random hex, different in
each message. The units cache once kept each whole string as its key: 1,500 of them took the
Python workers from 896 to 1,565 MB, and it stayed. A unit longer than the grammar allows is
now refused before any lookup. Each such message must end in exactly one terminal completion
(dead-lettered) and exactly one dead letter, while the other devices that send between them
are enriched in the batch that read them or the next.

At scale 1 (the main suite) a handful is sent; ``HEADWATER_TEST_UNITS_SCALE=N`` sends N times
the issue's 1,500 (15,000 x 200 KB, 3 GB, at 10: issue 35's 10x target), and the Python
workers' resident memory before and after is printed for docs/benchmarks.md.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from headwater.kafka.read import read_topic
from headwater.proto.events.v1 import dead_letter_pb2
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
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SCALE = int(os.environ.get("HEADWATER_TEST_UNITS_SCALE", "1"))
#: Messages with a 200 KB unit: a handful in the main suite, else SCALE x the issue's 1,500.
LONG = 6 if SCALE == 1 else 1_500 * SCALE
#: Their devices (spread over the ingest topic's partitions by key).
LONG_DEVICES = 3
#: Produced at once, then one message of each other device (the producer's queue is bounded).
SLICE = 100
OTHERS = 20


def _long_unit(i: int) -> Msg:
    unit = os.urandom(100_000).hex()  # 200 KB, new in each message
    payload = json.dumps({"readings": [{"k": "t", "v": 1, "u": unit}]}).encode()
    device = i % LONG_DEVICES
    return Msg(f"long-{i}", f"long-{device}", GLOBEX, payload, sequence=1 + i // LONG_DEVICES)


def _long_units(start: int) -> list[Msg]:
    return [_long_unit(i) for i in range(start, min(start + SLICE, LONG))]


@pytest.mark.timeout(1500)  # 3 GB through the broker and Spark at scale 10
def test_readings_with_200_kb_units_each_end_once_and_hold_no_one_back(
    kafka_bootstrap: str, spark, running, progress_log, tmp_path
) -> None:
    topics = make_topics(kafka_bootstrap)
    devices = [*(f"long-{i}" for i in range(LONG_DEVICES)), *(f"other-{i}" for i in range(OTHERS))]
    masters(kafka_bootstrap, topics, devices)
    # The enricher runs, warm (its Python workers have normalized a message), before the
    # long units arrive: what follows is what they add.
    ingest(kafka_bootstrap, topics, [Msg("warm", "other-0", ACME, acme(1, 2), 1)])
    q = running(settings_for(kafka_bootstrap, topics, str(tmp_path / "cp")))
    reader = TopicReader(kafka_bootstrap, topics.completions)
    terminal: Counter[str] = Counter()  # terminal completions per message
    done: dict[str, Any] = {}  # the terminal completion of each message
    parsed = 0  # records of the reader counted (each parsed once: 15,000 at 10x)

    def all_done(wanted: set[str]) -> Callable[[list[Any]], bool]:
        def check(records: list[Any]) -> bool:
            nonlocal parsed
            for c in completions(records[parsed:]):
                if outcome(c) != "OUTCOME_RETRY_SCHEDULED":
                    terminal[c.message_id] += 1
                    done[c.message_id] = c
            parsed = len(records)
            return wanted <= terminal.keys()

        return check

    reader.until(all_done({"warm"}), 180, alive(q))
    before = spark_memory(spark)

    started = time.monotonic()
    others: list[Msg] = []
    largest: list[float] = []  # the largest worker's MiB after each tenth of the long units
    slices = range(0, LONG, SLICE)
    for s, start in enumerate(slices, start=1):
        # Sequences after the warm-up message's (other-0's 1).
        batch = [
            Msg(f"o{d}-{s}", f"other-{d}", ACME, acme(21.0, 41.0), 1 + s) for d in range(OTHERS)
        ]
        ingest(kafka_bootstrap, topics, _long_units(start) + batch)
        others += batch
        reader.poll(0)
        if s % max(1, len(slices) // 10) == 0:
            largest.append(spark_memory(spark)["largest_worker_rss_mib"])
    sent_s = time.monotonic() - started
    wanted = {f"long-{i}" for i in range(LONG)} | {m.message_id for m in others}
    reader.until(all_done(wanted), 1200, alive(q))
    elapsed = time.monotonic() - started
    after = spark_memory(spark)

    assert q.exception() is None and q.isActive
    mine = wanted | {"warm"}
    assert set(terminal) == mine and set(terminal.values()) == {1}, "one terminal each"
    assert {outcome(done[f"long-{i}"]) for i in range(LONG)} == {"OUTCOME_DEAD_LETTERED"}
    assert {outcome(done[m.message_id]) for m in others} == {"OUTCOME_ENRICHED"}

    # Exactly one dead letter each, refused for its length, read as a stream (3 GB at 10x).
    letters: Counter[str] = Counter()
    for record in read_topic(kafka_bootstrap, topics.deadletter, timeout_s=120):
        letter = dead_letter_pb2.DeadLetter.FromString(record.value())
        letters[letter.message_id] += 1
        assert (letter.stage, letter.reason) == ("normalize", "UNIT_UNKNOWN"), letter.reason
        assert "longer than 40 characters" in letter.error_message, letter.error_message
        assert len(letter.error_message) < 200, "the error quotes 40 characters, not the unit"
    assert letters == Counter({f"long-{i}": 1 for i in range(LONG)})

    # The others were read behind the long units, then completed in that batch or the next.
    deadline = time.monotonic() + 60  # a batch's progress follows its completions
    coordinates = {m.message_id: done[m.message_id].source for m in others}
    while any(
        progress_log.batch_reading(topics.ingest[0], c.partition, c.offset) is None
        for c in coordinates.values()
    ):
        assert time.monotonic() < deadline, "no progress reported reading the others"
        time.sleep(0.5)
    later = Counter(
        progress_log.batch_at(done[m].completed_time.ToMilliseconds())
        - progress_log.batch_reading(topics.ingest[0], c.partition, c.offset)
        for m, c in coordinates.items()
    )
    assert set(later) <= {0, 1}, later
    durations = sorted(b["durationMs"].get("triggerExecution", 0) for b in progress_log.batches)
    print(
        f"\nlong units e2e: {LONG} x 200 KB units and {len(others)} others, sent in "
        f"{sent_s:.1f} s, all completed {elapsed:.1f} s after the first was sent; "
        f"{len(durations)} batches (longest {durations[-1] / 1000:.1f} s); others completed "
        f"{dict(later)} batches after the one that read them; memory before {before}, after "
        f"{after}; the largest worker while sending (MiB, each tenth): {largest}"
    )
    reader.close()
