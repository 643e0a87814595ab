"""``headwater dlq`` for operators (issue 35): tenants, latest letters, limits, errors, escapes.

Real broker, real commands. The volume run (memory, progress, a second redrive that
selects nothing) is in ``test_dlq_volume.py``.
"""

from __future__ import annotations

import json
import re
import time
import unicodedata
import uuid
from pathlib import Path

from google.protobuf.timestamp_pb2 import Timestamp

from headwater.ops.reasons import REASONS
from headwater.ops.render import escape
from headwater.proto.events.v1 import dead_letter_pb2
from tests.ops.test_ops_commands import _ingest_original, dead_letter, produce, run
from tests.support.kafkatools import read_from

ROOT = Path(__file__).resolve().parents[2]


def _letter(
    message_id: str, device: str, tenant: str, reason: str = "UNKNOWN_FORMAT", **source: int
) -> dead_letter_pb2.DeadLetter:
    letter = dead_letter_pb2.DeadLetter.FromString(dead_letter(message_id, reason))
    letter.device_id = device
    letter.original_headers.append(dead_letter_pb2.Header(key="tenant", value=tenant.encode()))
    for name, value in source.items():
        setattr(letter.source, name, value)
    return letter


def _rows(*args: str) -> list[dict[str, object]]:
    result = run(*args, "--json")
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_escape_covers_every_invisible_category_and_leaves_visible_text() -> None:
    for ch in ("\u061c", "\u2028", "\u2029", "\u2060", "\U000e0041", "\ue000", "\u200e"):
        assert escape(f"a{ch}b").isascii(), repr(ch)
    assert escape("\U000e0041") == "\\U000e0041" and escape("\u2028") == "\\u2028"
    # Every code point of those categories, not a hand list.
    invisible = {"Cc", "Cf", "Zl", "Zp", "Co", "Cs", "Cn"}
    hidden = [chr(c) for c in range(0x110000) if unicodedata.category(chr(c)) in invisible]
    assert len(hidden) > 900_000  # unassigned and private use are most of the range
    assert escape("".join(hidden)).isascii()
    assert escape("température 漢字 🌡 \u00a0x") == "température 漢字 🌡 \u00a0x"


def test_list_filters_by_tenant_and_keeps_the_latest_letter_of_each_message(
    kafka_bootstrap, topic_factory
):
    topic = topic_factory("dlq")
    first = _letter("m-1", "dev-1", "acme", "MASTER_DATA_MISSING")
    again = _letter("m-1", "dev-1", "acme", "UNKNOWN_FORMAT")  # its redrive failed again
    again.redrives.append(dead_letter_pb2.Redrive(by="ops", reason="fixed"))
    same_id_other_tenant = _letter("m-1", "dev-1", "globex")
    other = _letter("m-2", "dev-2", "globex")
    produce(
        kafka_bootstrap,
        topic,
        [m.SerializeToString() for m in (first, again, same_id_other_tenant, other)],
    )
    common = ("dlq", "list", "--bootstrap-servers", kafka_bootstrap, "--topic", topic)

    acme = _rows(*common, "--tenant", "acme")
    assert [(r["tenant"], r["reason"]) for r in acme] == [
        ("acme", "MASTER_DATA_MISSING"),
        ("acme", "UNKNOWN_FORMAT"),
    ]
    latest = _rows(*common, "--latest")
    assert [(r["tenant"], r["message_id"], r["redrives"]) for r in latest] == [
        ("acme", "m-1", 1),
        ("globex", "m-1", 0),
        ("globex", "m-2", 0),
    ]
    assert [r["message_id"] for r in _rows(*common, "--limit", "2")] == ["m-1", "m-1"]
    assert _rows(*common, "--tenant", "initech") == []
    table = run(*common, "--device", "dev-2")
    assert table.stdout.split()[:8] == [
        "OFFSET", "TIME", "REASON", "STAGE", "TENANT", "DEVICE", "MESSAGE_ID", "REDRIVES"
    ]  # fmt: skip


def test_a_second_redrive_selects_nothing_even_after_the_redrive_failed_again(
    kafka_bootstrap, topic_factory, ingest_topics
):
    dl_topic = topic_factory("dlq")
    message_id, device = f"m-{uuid.uuid4().hex[:8]}", f"dev-{uuid.uuid4().hex[:8]}"
    at = _ingest_original(kafka_bootstrap, message_id, device, "acme")
    produce(
        kafka_bootstrap,
        dl_topic,
        [_letter(message_id, device, "acme", offset=at).SerializeToString()],
    )

    def redrive(*extra: str) -> tuple[list[dict[str, object]], str]:
        result = run(
            *("dlq", "redrive", "--bootstrap-servers", kafka_bootstrap, "--topic", dl_topic),
            *("--why", "fixed", "--by", "ops", "--json", *extra),
        )
        assert result.returncode == 0, result.stderr
        return [json.loads(line) for line in result.stdout.splitlines()], result.stderr

    rows, _ = redrive("--execute")
    assert [r["sent"] for r in rows] == [True]
    # The enricher fails the redriven record again: a new letter whose source is the redrive.
    redriven = [
        m
        for m in read_from(kafka_bootstrap, "ingest.telemetry.v1", {0: at})
        if dict(m.headers() or []).get("message-id") == message_id.encode()
        and "redrive-count" in dict(m.headers() or [])
    ]
    assert len(redriven) == 1
    failed_again = _letter(
        message_id, device, "acme", partition=redriven[0].partition(), offset=redriven[0].offset()
    )
    failed_again.redrives.append(dead_letter_pb2.Redrive(by="ops", reason="fixed"))
    produce(kafka_bootstrap, dl_topic, [failed_again.SerializeToString()])

    rows, err = redrive()
    assert [(r["sent"], r["skipped_reason"]) for r in rows] == [
        (False, "already redriven (add --force to send it again)")
    ]
    assert "would send 0 " in err and "1 selected" in err
    rows, err = redrive("--again")  # asked for: the latest letter, once
    assert [(r["sent"], r["skipped_reason"]) for r in rows] == [(False, "")]
    assert "would send 1 " in err


def test_an_unreachable_cluster_is_one_line_and_exit_2_quickly() -> None:
    started = time.monotonic()
    result = run("dlq", "list", "--bootstrap-servers", "127.0.0.1:1")
    took = time.monotonic() - started
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("headwater dlq list: could not reach Kafka at 127.0.0.1:1")
    assert took < 30, took  # 5 s of waiting plus the interpreter's start, on a loaded machine


def test_a_misspelled_topic_is_an_error_not_nothing(kafka_bootstrap) -> None:
    result = run("dlq", "list", "--bootstrap-servers", kafka_bootstrap, "--topic", "deadleter.v1")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1, result.stderr
    assert "topic deadleter.v1 does not exist" in result.stderr


def test_times_say_which_zone_they_were_taken_in(kafka_bootstrap, topic_factory) -> None:
    topic = topic_factory("dlq")
    ts = Timestamp()
    ts.FromJsonString("2026-11-22T10:30:00Z")
    letter = _letter("m-tz", "dev-1", "acme")
    letter.dead_lettered_time.CopyFrom(ts)
    produce(kafka_bootstrap, topic, [letter.SerializeToString()])
    common = ("dlq", "list", "--bootstrap-servers", kafka_bootstrap, "--topic", topic)

    assert len(_rows(*common, "--since", "2026-11-22T11:00:00+01:00")) == 1  # 10:00 UTC
    assert _rows(*common, "--since", "2026-11-22T10:31:00Z") == []
    naive = run(*common, "--since", "2026-11-22T10:00:00", "--json")
    assert naive.returncode == 0 and len(naive.stdout.splitlines()) == 1
    assert "--since 2026-11-22T10:00:00 has no offset: taken as UTC" in naive.stderr
    bad = run(*common, "--until", "yesterday")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    assert "--until 'yesterday' is no ISO 8601 time" in bad.stderr


def test_help_lists_every_reason_the_enricher_documents() -> None:
    documented = (ROOT / "docs/enricher.md").read_text()
    row = next(line for line in documented.splitlines() if line.startswith("| `DEAD_LETTERED`"))
    reasons = set(re.findall(r"`([A-Z][A-Z_]+[A-Z])`", row)) - {"DEAD_LETTERED", "MAX_ATTEMPTS"}
    assert reasons == set(REASONS)
    shown = run("dlq", "list", "--help")
    for reason in REASONS:
        assert reason in shown.stdout
