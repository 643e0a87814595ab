"""End to end in this process: known raw messages in -> exact records out (real broker, Spark)."""

from __future__ import annotations

import dataclasses
import time

import pytest

from headwater.proto.events.v1 import (
    dead_letter_pb2,
    device_state_pb2,
    event_pb2,
    parked_message_pb2,
)
from tests.support.enricher import alive, settings_for
from tests.support.event_ids import event_id
from tests.support.kafkatools import (
    ACME,
    ALARM,
    GLOBEX,
    INITECH,
    TENANT,
    TERMINAL,
    Msg,
    TopicReader,
    acme,
    completions,
    ingest,
    make_topics,
    master,
    masters,
    outcome,
    read_all,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]


GLOBEX_PAYLOAD = (
    b'{"readings": [{"k": "temperature", "v": 70.7, "u": "F"}, '
    b'{"k": "pressure", "v": 14.7, "u": "psi"}]}'
)


def test_known_messages_give_exact_outputs(kafka_bootstrap: str, running, tmp_path) -> None:
    topics = make_topics(kafka_bootstrap)
    master(kafka_bootstrap, topics, "dev-1", "plant-1", "A1")
    master(kafka_bootstrap, topics, "dev-2", "plant-2", "B2")
    msgs = [
        Msg("m1", "dev-1", ACME, acme(21.5, 40.1), 1, 1_000),
        Msg("m2", "dev-2", GLOBEX, GLOBEX_PAYLOAD, 1, 1_000),
        Msg("m3", "dev-1", INITECH, b"294.65,0.401,3300", 3, 3_000),
        Msg(
            "m4",
            "dev-2",
            ALARM,
            b'{"code":"E42","severity":"critical","text":"hot"}',
            2,
            2_000,
            "alarms",
        ),
        Msg("m1", "dev-1", ACME, acme(21.5, 40.1), 1, 1_000),  # resend -> DUPLICATE
        Msg("m5", "dev-1", ACME, b"\xff{", 4, 4_000),  # poison
        Msg("m6", "dev-1", "application/x-unknown", b"{}", 5, 5_000),  # unknown format
        Msg("m7", "dev-3", ACME, acme(1, 2), 1, 1_000),  # no master data ever
    ]
    ingest(kafka_bootstrap, topics, msgs, raw=[("dev-9", b"\xff\xff garbage")])
    q = running(settings_for(kafka_bootstrap, topics, str(tmp_path / "cp")))
    reader = TopicReader(kafka_bootstrap, topics.completions)
    # m7: RETRY_SCHEDULED x2 then DEAD_LETTERED after max_attempts=3.
    reader.until(lambda r: len(r) >= 11, 120, alive(q))
    got = sorted(
        (c.message_id, outcome(c), c.reason, c.attempt, len(c.events))
        for c in completions(reader.records)
    )
    assert got == [
        ("m1", "OUTCOME_DUPLICATE", "", 1, 0),
        ("m1", "OUTCOME_ENRICHED", "", 1, 1),
        ("m2", "OUTCOME_ENRICHED", "", 1, 1),
        ("m3", "OUTCOME_ENRICHED", "", 1, 1),
        ("m4", "OUTCOME_ENRICHED", "", 1, 1),
        ("m5", "OUTCOME_DEAD_LETTERED", "PAYLOAD_UNDECODABLE", 1, 0),
        ("m6", "OUTCOME_DEAD_LETTERED", "UNKNOWN_FORMAT", 1, 0),
        ("m7", "OUTCOME_DEAD_LETTERED", "MASTER_DATA_MISSING", 3, 0),
        ("m7", "OUTCOME_RETRY_SCHEDULED", "MASTER_DATA_MISSING", 1, 0),
        ("m7", "OUTCOME_RETRY_SCHEDULED", "MASTER_DATA_MISSING", 2, 0),
        ("raw-dev-9", "OUTCOME_DEAD_LETTERED", "ENVELOPE_UNDECODABLE", 1, 0),
    ]
    # Every EventRef points at the event it names.
    events = {}
    for topic in (topics.event_topic("telemetry"), topics.event_topic("alarm")):
        for m in read_all(kafka_bootstrap, topic):
            events[(m.topic(), m.partition(), m.offset())] = event_pb2.Event.FromString(m.value())
    for c in completions(reader.records):
        for ref in c.events:
            ev = events[(ref.topic, ref.partition, ref.offset)]
            assert (ev.event_id, ev.message_id) == (ref.event_id, c.message_id)
    by_id = {e.message_id: e for e in events.values()}
    assert sorted(by_id) == ["m1", "m2", "m3", "m4"]
    assert by_id["m2"].event_id == event_id(TENANT, "dev-2", "m2", 0)
    assert [(m.name, m.value, m.unit) for m in by_id["m2"].measurements] == [
        ("temperature", 21.5, "celsius"),
        ("pressure", 101352.93221, "pascal"),
    ]
    assert (by_id["m2"].site, by_id["m2"].area_code, by_id["m4"].alarm.code) == (
        "plant-2",
        "B2",
        "E42",
    )
    assert by_id["m3"].source_format == "initech.telemetry.v1+csv"
    # Dead letters carry the original bytes, coordinates, stage and reason.
    dls = {
        d.reason: d
        for d in (
            dead_letter_pb2.DeadLetter.FromString(m.value())
            for m in read_all(kafka_bootstrap, topics.deadletter)
        )
    }
    assert set(dls) == {
        "PAYLOAD_UNDECODABLE",
        "UNKNOWN_FORMAT",
        "MASTER_DATA_MISSING",
        "ENVELOPE_UNDECODABLE",
    }
    assert dls["ENVELOPE_UNDECODABLE"].original_value == b"\xff\xff garbage"
    assert (dls["ENVELOPE_UNDECODABLE"].stage, dls["ENVELOPE_UNDECODABLE"].source.topic) == (
        "decode",
        topics.ingest[0],
    )
    assert (dls["MASTER_DATA_MISSING"].stage, dls["MASTER_DATA_MISSING"].attempts) == ("enrich", 3)
    retries = [
        parked_message_pb2.ParkedMessage.FromString(m.value())
        for m in read_all(kafka_bootstrap, topics.retry)
    ]
    assert sorted((p.message_id, p.attempt) for p in retries) == [("m7", 1), ("m7", 2)]
    # The latest snapshot of each device.
    snaps = {}
    for m in read_all(kafka_bootstrap, topics.state):
        s = device_state_pb2.DeviceState.FromString(m.value())
        snaps[s.device_id] = s
    assert set(snaps) == {"dev-1", "dev-2"}
    assert (
        snaps["dev-1"].message_count,
        snaps["dev-1"].last_sequence,
        snaps["dev-1"].gaps_detected,
    ) == (2, 3, 1)
    assert snaps["dev-1"].last_message_id == "m3"
    assert {v.name: v.value for v in snaps["dev-1"].latest_values} == {
        "temperature": 21.5,
        "humidity": 40.1,
        "voltage": 3.3,
    }
    reader.close()


def test_late_master_data_is_picked_up_by_a_retry(kafka_bootstrap: str, running, tmp_path) -> None:
    topics = make_topics(kafka_bootstrap)
    ingest(kafka_bootstrap, topics, [Msg("late-1", "dev-late", ACME, acme(20, 50))])
    q = running(settings_for(kafka_bootstrap, topics, str(tmp_path / "cp"), max_attempts=50))
    reader = TopicReader(kafka_bootstrap, topics.completions)
    reader.until(lambda r: len(r) >= 1, 90, alive(q))
    assert outcome(completions(reader.records)[0]) == "OUTCOME_RETRY_SCHEDULED"
    master(kafka_bootstrap, topics, "dev-late", "plant-9", "Z9")
    done = lambda r: any(outcome(c) in TERMINAL for c in completions(r))  # noqa: E731
    reader.until(done, 60, alive(q))
    final = [c for c in completions(reader.records) if outcome(c) in TERMINAL]
    assert [(c.message_id, outcome(c)) for c in final] == [("late-1", "OUTCOME_ENRICHED")]
    assert final[0].attempt >= 2
    (ev,) = [
        event_pb2.Event.FromString(m.value())
        for m in read_all(kafka_bootstrap, topics.event_topic("telemetry"))
    ]
    assert (ev.site, ev.area_code, ev.event_id) == (
        "plant-9",
        "Z9",
        event_id(TENANT, "dev-late", "late-1", 0),
    )
    reader.close()


def test_a_resend_after_the_window_is_still_a_duplicate(
    kafka_bootstrap: str, running, tmp_path
) -> None:
    # A 2-second window stands for the hour: the resend comes after the original's id
    # left the recent tier for the older one (filed by device-time hour, dedupe.py).
    topics = make_topics(kafka_bootstrap)
    master(kafka_bootstrap, topics, "dev-1")
    now = int(time.time() * 1000)
    original = Msg("once", "dev-1", ACME, acme(20, 50), 1, now)
    ingest(kafka_bootstrap, topics, [original])
    cp = str(tmp_path / "cp")
    q = running(settings_for(kafka_bootstrap, topics, cp, dedup_window_seconds=2.0))
    reader = TopicReader(kafka_bootstrap, topics.completions)
    ids = lambda r: [(c.message_id, outcome(c)) for c in completions(r)]  # noqa: E731
    reader.until(lambda r: ("once", "OUTCOME_ENRICHED") in ids(r), 90, alive(q))
    time.sleep(3.0)  # past the window and its slack
    # The device's next batch moves "once" to the older tier.
    ingest(kafka_bootstrap, topics, [Msg("next", "dev-1", ACME, acme(21, 50), 2, now + 3000)])
    reader.until(lambda r: ("next", "OUTCOME_ENRICHED") in ids(r), 60, alive(q))
    ingest(kafka_bootstrap, topics, [original])  # the gateway resends it
    reader.until(lambda r: len(ids(r)) >= 3, 60, alive(q))
    assert ids(reader.records) == [
        ("once", "OUTCOME_ENRICHED"),
        ("next", "OUTCOME_ENRICHED"),
        ("once", "OUTCOME_DUPLICATE"),
    ]
    reader.close()


def test_restart_from_checkpoint_loses_nothing(kafka_bootstrap: str, running, tmp_path) -> None:
    topics = make_topics(kafka_bootstrap)
    masters(kafka_bootstrap, topics, [f"dev-{d}" for d in range(4)])
    first = [Msg(f"a{i}", f"dev-{i % 4}", ACME, acme(i, i), i // 4 + 1) for i in range(40)]
    ingest(kafka_bootstrap, topics, first)
    cp = str(tmp_path / "cp")
    s = settings_for(kafka_bootstrap, topics, cp, max_records_per_trigger=8)
    q = running(s)
    reader = TopicReader(kafka_bootstrap, topics.completions)
    reader.until(lambda r: len(r) >= 10, 90, alive(q))
    q.stop()  # mid-stream: later batches not yet run, maybe one cut short
    second = [Msg(f"b{i}", f"dev-{i % 4}", ACME, acme(i, i), 20 + i // 4) for i in range(20)]
    ingest(kafka_bootstrap, topics, second)
    q2 = running(dataclasses.replace(s, starting_offsets=""))  # the checkpoint decides
    wanted = {m.message_id for m in first + second}
    done = lambda r: wanted <= {c.message_id for c in completions(r) if outcome(c) in TERMINAL}  # noqa: E731
    reader.until(done, 180, alive(q2))
    reader.poll(1.0)
    terminal: dict[str, set[tuple[str, tuple[str, ...]]]] = {}
    for c in completions(reader.records):
        if outcome(c) in TERMINAL:
            terminal.setdefault(c.message_id, set()).add(
                (outcome(c), tuple(e.event_id for e in c.events))
            )
    # Repeats (a replayed batch) are identical: same outcome, same event ids.
    assert {mid: len(v) for mid, v in terminal.items()} == dict.fromkeys(wanted, 1)
    device_of = {m.message_id: m.device_id for m in first + second}
    for mid, ((out, ids),) in terminal.items():
        assert (out, ids) == ("OUTCOME_ENRICHED", (event_id(TENANT, device_of[mid], mid, 0),))
    reader.close()
