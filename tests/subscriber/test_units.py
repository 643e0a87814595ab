"""Pure parts of the subscriber: settings, dedup stores, stable ids, decoders, errors."""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path

import pytest

from headwater.proto.events.v1 import completion_pb2, event_pb2
from headwater.runtime.env import SettingError
from headwater.subscriber import (
    Delivery,
    MemoryDedup,
    SqliteDedup,
    StartPointRequiredError,
    SubscriberSettings,
    completion_key,
    decode_completion,
    decode_event,
)

from .conftest import completion, event


def test_settings_from_env_defaults_and_names():
    s = SubscriberSettings.from_env({"HEADWATER_SUBSCRIBER_GROUP_ID": "billing"})
    assert s.topics == ("completions.v1",)
    assert s.dead_letter == "billing.deadletter.v1"
    assert s.start is None  # never a default start point
    s = SubscriberSettings.from_env(
        {
            "HEADWATER_SUBSCRIBER_GROUP_ID": "billing",
            "HEADWATER_SUBSCRIBER_TOPICS": "events.telemetry.v1, events.alarm.v1",
            "HEADWATER_SUBSCRIBER_DEAD_LETTER_TOPIC": "billing.parked",
            "HEADWATER_SUBSCRIBER_START": "earliest",
            "HEADWATER_SUBSCRIBER_MAX_ATTEMPTS": "3",
        }
    )
    assert s.topics == ("events.telemetry.v1", "events.alarm.v1")
    assert (s.dead_letter, s.start, s.max_attempts) == ("billing.parked", "earliest", 3)


@pytest.mark.parametrize(
    ("env", "names"),
    [
        ({}, "HEADWATER_SUBSCRIBER_GROUP_ID"),
        ({"HEADWATER_SUBSCRIBER_START": "beginning"}, "HEADWATER_SUBSCRIBER_START"),
        ({"HEADWATER_SUBSCRIBER_MAX_ATTEMPTS": "0"}, "HEADWATER_SUBSCRIBER_MAX_ATTEMPTS"),
    ],
)
def test_settings_errors_name_the_variable(env, names):
    with pytest.raises(SettingError, match=names):
        SubscriberSettings.from_env({"HEADWATER_SUBSCRIBER_GROUP_ID": "g"} | env if env else {})


def test_memory_dedup_is_a_bounded_lru():
    d = MemoryDedup(max_entries=2)
    d.record("a")
    d.record("b")
    assert d.seen("a")  # refreshes a
    d.record("c")  # evicts b, the least recently seen
    assert (d.seen("a"), d.seen("b"), d.seen("c")) == (True, False, True)


def test_sqlite_dedup_survives_reopening_and_forgets_the_oldest(tmp_path):
    path = tmp_path / "dedup.db"
    d = SqliteDedup(path, max_entries=100)
    for i in range(2500):
        d.record(f"k{i}")
    d.record("k2499")  # recording twice is harmless
    d.close()
    d = SqliteDedup(path, max_entries=100)
    assert d.seen("k2499") and d.seen("k2400")
    assert not d.seen("k0")  # pruned: the store stays bounded
    d.close()
    with sqlite3.connect(path) as db:
        (rows,) = db.execute("SELECT COUNT(*) FROM handled").fetchone()
    assert rows <= 100 + 1000  # pruned every 1,000 inserts


def test_completion_keys_name_the_message_and_the_fact_not_the_record():
    c = completion_pb2.Completion.FromString(completion("m1", offset=5))
    assert completion_key(c) == completion_key(
        completion_pb2.Completion.FromString(c.SerializeToString())
    )
    # A gateway resend enriched again is another ingest record: the same key.
    resend = completion_pb2.Completion.FromString(completion("m1", offset=6))
    assert completion_key(resend) == completion_key(c)
    retry = completion_pb2.OUTCOME_RETRY_SCHEDULED
    others = [
        completion("m2", offset=5),
        completion("m1", offset=5, attempt=2),
        completion("m1", offset=5, outcome=retry),
        completion("m1", offset=5, device="acme-2"),  # message ids are per device
        completion("m1", offset=5, tenant="globex"),  # and per tenant
        # No choice of the parts collides with another's.
        completion("m1", offset=5, tenant="acme", device='acme-1","m1'),
        completion('acme-1","m1', offset=5, tenant="acme", device=""),
    ]
    keys = {completion_key(completion_pb2.Completion.FromString(v)) for v in others}
    assert len(keys) == len(others) and completion_key(c) not in keys


def test_a_redriven_message_dead_lettered_again_is_news_a_replay_is_not():
    dead = completion_pb2.OUTCOME_DEAD_LETTERED

    def letter(reason: str, offset: int) -> completion_pb2.Completion:
        c = completion_pb2.Completion.FromString(completion("m1", outcome=dead, offset=offset))
        c.reason = reason
        return c

    first = letter("UNIT_UNKNOWN", 5)
    # Redriven (a new ingest record) and dead-lettered again at the same attempt, for
    # another reason, or even the same one: not a repeat of the first.
    assert completion_key(letter("NORMALIZE_BUDGET", 9)) != completion_key(first)
    assert completion_key(letter("UNIT_UNKNOWN", 9)) != completion_key(first)
    # A Spark replay of the same record is.
    assert completion_key(letter("UNIT_UNKNOWN", 5)) == completion_key(first)


def test_a_store_recognises_the_redriven_dead_letter_as_new():
    from headwater.subscriber import MemoryDedup

    store = MemoryDedup()
    dead = completion_pb2.OUTCOME_DEAD_LETTERED
    _, key = decode_completion(completion("m1", outcome=dead, offset=5))
    store.record(key)
    _, again = decode_completion(completion("m1", outcome=dead, offset=5))
    _, redriven = decode_completion(completion("m1", outcome=dead, offset=9))
    assert store.seen(again) and not store.seen(redriven)


def test_decoders_return_the_generated_class_and_the_id():
    c, key = decode_completion(completion("m1", offset=5))
    assert isinstance(c, completion_pb2.Completion) and key == completion_key(c)
    e, key = decode_event(event("e-1"))
    assert isinstance(e, event_pb2.Event) and key == "e-1"


@pytest.mark.parametrize(
    ("decoder", "value"),
    [
        (decode_completion, b"\xff\xfe"),  # not protobuf
        (decode_completion, event("e-1")),  # another message: no message_id/outcome
        (decode_event, event_pb2.Event(device_id="acme-1").SerializeToString()),  # no id
        (decode_event, b""),
    ],
)
def test_decoders_refuse_what_is_not_their_message(decoder, value):
    with pytest.raises(Exception):  # noqa: B017 - DecodeError or ValueError: both park
        decoder(value)


def test_delivery_header_is_the_last_value():
    d = Delivery(
        event_pb2.Event(),
        "k",
        "t",
        0,
        1,
        b"acme-1",
        (("traceparent", b"00-a"), ("x", b"1"), ("traceparent", b"00-b")),
    )
    assert d.header("traceparent") == b"00-b" and d.header("nope") is None


def test_start_point_error_says_what_to_run():
    e = StartPointRequiredError("billing", "completions.v1", 3, "no committed offset")
    text = str(e)
    assert "completions.v1[3]: no committed offset" in text
    assert "headwater offsets show --group billing" in text
    assert "headwater offsets reset --group billing --topic completions.v1" in text
    assert "headwater offsets reset --help" in text
    assert not e.retriable and (e.group_id, e.topic, e.partition) == (
        "billing",
        "completions.v1",
        3,
    )


def test_every_setting_is_in_the_docs_table():
    doc = (Path(__file__).parents[2] / "docs" / "subscribe.md").read_text()
    for f in dataclasses.fields(SubscriberSettings):
        row = f"| `{f.name}` | `{SubscriberSettings.variable(f.name)}` |"
        assert row in doc, f"docs/subscribe.md: add the settings row for {f.name}"


def test_a_leader_move_is_one_line_per_partition_and_move(caplog):
    from aiokafka import TopicPartition

    from headwater.subscriber.leaders import LeaderMoves

    class Cluster:
        def __init__(self, leaders):
            self.leaders = leaders

        def leader_for_partition(self, tp):
            return self.leaders.get(tp)

    t0, t1 = TopicPartition("t", 0), TopicPartition("t", 1)
    moves = LeaderMoves("billing")
    caplog.set_level("INFO", logger="headwater.subscriber")
    for leaders in (
        {t0: 1, t1: 2},  # first sight: nothing moved
        {t0: 1, t1: 2},
        {t0: -1, t1: 2},  # mid-election: not a move yet
        {t0: 3},  # t1 unknown for a moment
        {t0: 3, t1: 2},
    ):
        moves.check(Cluster(leaders), [t0, t1])
    (line,) = [r for r in caplog.records if r.getMessage() == "Kafka partition leader moved"]
    assert (line.group, line.partition, line.from_node, line.to_node) == ("billing", "t[0]", 1, 3)
