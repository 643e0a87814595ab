"""``headwater dlq`` against hostile letters and a struggling producer (issue 22).

Real broker, real commands: a dead letter quoting terminal escapes from a payload, a
redrive that cannot be delivered, and a redrive larger than the producer's local queue.
"""

from __future__ import annotations

import uuid

import pytest

from headwater.kafka.admin import ensure_topics
from headwater.ops import dlq
from headwater.ops.render import escape, table
from headwater.proto.events.v1 import dead_letter_pb2
from headwater.topics import TopicSpec
from tests.ops.test_ops_commands import dead_letter, produce, run
from tests.support.kafkatools import end_offsets, read_from

#: Set the terminal's title, clear the screen, reverse the text that follows.
HOSTILE = "\x1b]0;pwned\x07\x1b[2J\u202e"


def _hostile_letter(message_id: str) -> bytes:
    letter = dead_letter_pb2.DeadLetter.FromString(dead_letter(message_id, "PAYLOAD_INVALID"))
    letter.error_message = f"{HOSTILE}temp: 'x' is not a number"
    letter.original_headers.append(dead_letter_pb2.Header(key=f"x-{HOSTILE}", value=b"v\r\x1b[1A"))
    return letter.SerializeToString()


def test_escape_leaves_no_control_character_and_keeps_what_it_is_told() -> None:
    assert escape(HOSTILE) == "\\x1b]0;pwned\\x07\\x1b[2J\\u202e"
    assert escape("a\nb\tc\r", keep="\n\t") == "a\nb\tc\\x0d"
    assert "\x1b" not in table([{"error": HOSTILE}], ["error"])


def test_dlq_show_and_list_print_no_raw_control_characters(kafka_bootstrap, topic_factory):
    topic = topic_factory("dlq")
    produce(kafka_bootstrap, topic, [_hostile_letter("m-esc")])
    common = ("--bootstrap-servers", kafka_bootstrap, "--topic", topic)
    shown = run("dlq", "show", *common, "--message-id", "m-esc")
    listed = run("dlq", "list", *common)
    assert shown.returncode == listed.returncode == 0, shown.stderr + listed.stderr
    for out in (shown.stdout, listed.stdout):
        assert not {"\x1b", "\x07", "\r", "\u202e"} & set(out), repr(out)
    assert "\\x1b]0;pwned\\x07" in shown.stdout  # escaped, still readable
    assert "temp: 'x' is not a number" in shown.stdout


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ((), "could not look for earlier redrives in ingest.telemetry.v1/5"),
        (("--force",), "1 of 1 redriven records were not acknowledged by the broker"),
    ],
)
def test_a_redrive_error_is_one_line_and_a_non_zero_exit(
    kafka_bootstrap, topic_factory, extra: tuple[str, ...], says: str
):
    # The original's partition (5) does not exist in the one-partition ingest topic: the
    # redrive can neither be checked (without --force) nor delivered (with it); both used
    # to end in a traceback.
    ensure_topics(kafka_bootstrap, [TopicSpec("ingest.telemetry.v1", 1, 1)])
    topic = topic_factory("dlq")
    letter = dead_letter_pb2.DeadLetter.FromString(dead_letter("m-lost", "UNKNOWN_FORMAT"))
    letter.source.partition = 5
    produce(kafka_bootstrap, topic, [letter.SerializeToString()])
    result = run(
        *("dlq", "redrive", "--bootstrap-servers", kafka_bootstrap, "--topic", topic),
        *("--message-id", "m-lost", "--why", "test", "--execute", *extra),
    )
    assert result.returncode == 2  # bad input or an unusable cluster: exit 2, one line
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("headwater dlq redrive: "), result.stderr
    assert says in lines[0]


@pytest.mark.timeout(180)
def test_a_redrive_larger_than_the_local_queue_waits_for_room_and_sends_all(
    kafka_bootstrap, topic_factory
):
    ensure_topics(kafka_bootstrap, [TopicSpec("ingest.telemetry.v1", 1, 1)])
    topic = topic_factory("dlq")
    run_id = uuid.uuid4().hex[:8]
    ids = [f"big-{run_id}-{i}" for i in range(300)]
    produce(kafka_bootstrap, topic, [dead_letter(m, "UNKNOWN_FORMAT") for m in ids])
    letters = list(dlq.read_dead_letters(kafka_bootstrap, topic))
    # A local queue of 5 records: without serving deliveries, the 6th produce raised
    # BufferError and the redrive died half-sent.
    before = end_offsets(kafka_bootstrap, "ingest.telemetry.v1")
    results = list(
        dlq.redrive(
            kafka_bootstrap,
            letters,
            "ops",
            "queue test",
            dry_run=False,
            force=True,
            producer_overrides={"queue.buffering.max.messages": 5},
        )
    )
    assert sum(r.sent for r in results) == 300
    landed = {
        dict(m.headers() or []).get("message-id", b"").decode()
        for m in read_from(kafka_bootstrap, "ingest.telemetry.v1", before)
    }
    assert set(ids) <= landed
