"""End to end (real broker, local Spark): poison records and scoped identities.

Each poison record of issue 16 goes through a running enricher: it must become a dead
letter naming its stage, the query must keep running, and the good messages written
behind it (same batch, same device) must be enriched.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from headwater.enricher.driver import job
from headwater.proto.device.v1 import device_message_pb2
from headwater.proto.events.v1 import dead_letter_pb2, device_state_pb2, event_pb2
from tests.support.enricher import alive, settings_for
from tests.support.event_ids import event_id
from tests.support.kafkatools import (
    ACME,
    ALARM,
    GLOBEX,
    Msg,
    TopicReader,
    acme,
    completions,
    envelope,
    ingest,
    ingest_headers,
    make_topics,
    master,
    masters,
    outcome,
    producer,
    read_all,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture
def running(spark, tmp_path) -> Iterator[Any]:
    """Start queries with ``running(settings)``; all are stopped at the end of the test."""
    queries = []

    def start(settings: Any) -> Any:
        q = job.start(spark, settings, str(tmp_path / "stats.jsonl"))
        queries.append(q)
        return q

    yield start
    for q in queries:
        q.stop()


def _raw_envelope(m: Msg, **fields: Any) -> bytes:
    """An envelope ingest would now refuse, as an older ingest (or another writer) wrote it."""
    dm = device_message_pb2.DeviceMessage.FromString(envelope(m))
    if "nanos" in fields:
        dm.device_time.nanos = fields["nanos"]
    if "sequence" in fields:
        dm.sequence = fields["sequence"]
    return dm.SerializeToString()


def _globex(names: list[str]) -> bytes:
    readings = [{"k": n, "v": 1.0, "u": "C"} for n in names]
    return json.dumps({"readings": readings}).encode()


def test_poison_records_become_dead_letters_and_the_rest_is_enriched(
    kafka_bootstrap: str, running, tmp_path
) -> None:
    topics = make_topics(kafka_bootstrap)
    master(kafka_bootstrap, topics, "dev-1")
    master(kafka_bootstrap, topics, "dev-big")
    p = producer(kafka_bootstrap)
    surrogate_name = b'{"readings": [{"k": "\\ud800", "v": 1, "u": "C"}]}'
    surrogate_text = b'{"code": "E1", "text": "\\udfff"}'
    poison = {
        # Nanos out of range: Timestamp.ToMilliseconds raised and stopped the query.
        "p-nanos": _raw_envelope(Msg("p-nanos", "dev-1", ACME, acme(1, 2), 1), nanos=-1),
        # sequence >= 2^63 does not fit the long column.
        "p-seq": _raw_envelope(Msg("p-seq", "dev-1", ACME, acme(1, 2), 2), sequence=2**64 - 1),
        # Lone surrogate escapes: valid JSON, but no encoder accepts the strings.
        "p-surrogate": envelope(Msg("p-surrogate", "dev-1", GLOBEX, surrogate_name, 3)),
        "p-alarm": envelope(Msg("p-alarm", "dev-1", ALARM, surrogate_text, 4)),
    }
    for mid, value in poison.items():
        topic = topics.ingest[1] if mid == "p-alarm" else topics.ingest[0]
        headers = ingest_headers(Msg(mid, "dev-1", ACME, b""))
        p.produce(topic, value, b"dev-1", headers=headers)
    assert p.flush(30) == 0
    # A snapshot that outgrows the producer's maximum record size (1 MB): 9,000 distinct
    # 120-character names with the cap lifted. The snapshot record is refused by produce().
    big = [
        Msg(
            f"big-{i}",
            "dev-big",
            GLOBEX,
            _globex([f"{i:04d}{j:04d}".ljust(120, "x") for j in range(900)]),
            i + 1,
        )
        for i in range(10)
    ]
    good = [Msg(f"ok-{i}", "dev-1", ACME, acme(i, i), 10 + i) for i in range(3)]
    good += [Msg("ok-big", "dev-big", ACME, acme(1, 1), 100)]
    ingest(kafka_bootstrap, topics, big + good)
    settings = settings_for(
        kafka_bootstrap, topics, str(tmp_path / "cp"), max_latest_values=1_000_000
    )
    q = running(settings)
    reader = TopicReader(kafka_bootstrap, topics.completions)
    wanted = {*poison, *(m.message_id for m in big + good)}
    done = lambda r: wanted <= {c.message_id for c in completions(r)}  # noqa: E731
    reader.until(done, 180, alive(q))
    by_id = {c.message_id: c for c in completions(reader.records)}
    for mid in poison:
        assert outcome(by_id[mid]) == "OUTCOME_DEAD_LETTERED", mid
    for m in big + good:
        got = by_id[m.message_id]
        assert outcome(got) == "OUTCOME_ENRICHED", (m.message_id, got.reason)
    assert q.exception() is None and q.isActive
    letters = [
        dead_letter_pb2.DeadLetter.FromString(m.value())
        for m in read_all(kafka_bootstrap, topics.deadletter)
    ]
    stages = {d.message_id: (d.stage, d.reason) for d in letters if d.message_id}
    assert stages["p-nanos"] == ("decode", "ENVELOPE_INVALID")
    assert stages["p-seq"] == ("decode", "ENVELOPE_INVALID")
    assert stages["p-surrogate"] == ("encode", "UNENCODABLE_VALUE")
    assert stages["p-alarm"] == ("encode", "UNENCODABLE_VALUE")
    refused = [d for d in letters if d.stage == "produce"]
    assert refused and all(d.reason == "PRODUCE_REFUSED" for d in refused)
    assert all(d.device_id == "dev-big" for d in refused)
    assert "state" in refused[0].error_message
    reader.close()


def test_default_cap_bounds_the_snapshot_and_reports_the_overflow(
    kafka_bootstrap: str, running, tmp_path
) -> None:
    topics = make_topics(kafka_bootstrap)
    master(kafka_bootstrap, topics, "dev-many")
    msgs = [Msg("many-1", "dev-many", GLOBEX, _globex([f"q{j}" for j in range(150)]), 1)]
    ingest(kafka_bootstrap, topics, msgs)
    q = running(settings_for(kafka_bootstrap, topics, str(tmp_path / "cp"), max_latest_values=100))
    reader = TopicReader(kafka_bootstrap, topics.completions)
    reader.until(lambda r: len(r) >= 1, 120, alive(q))
    (snap,) = [
        device_state_pb2.DeviceState.FromString(m.value())
        for m in read_all(kafka_bootstrap, topics.state)
    ]
    assert (len(snap.latest_values), snap.latest_values_dropped) == (100, 50)
    reader.close()


def test_two_tenants_and_devices_with_the_same_message_ids_stay_apart(
    kafka_bootstrap: str, running, tmp_path
) -> None:
    topics = make_topics(kafka_bootstrap)
    tenants, devices = ("ta", "tb"), ("d1", "d2")
    for t in tenants:
        masters(kafka_bootstrap, topics, list(devices), site=f"site-{t}", tenant=t)
    msgs = [
        Msg(mid, d, ACME, acme(1, 2), int(mid), tenant=t)
        for t in tenants
        for d in devices
        for mid in ("1", "2")
    ]
    ingest(kafka_bootstrap, topics, msgs)
    q = running(settings_for(kafka_bootstrap, topics, str(tmp_path / "cp")))
    reader = TopicReader(kafka_bootstrap, topics.completions)
    reader.until(lambda r: len(r) >= len(msgs), 120, alive(q))
    reader.poll(1.0)
    got = sorted(
        (c.tenant, c.device_id, c.message_id, outcome(c)) for c in completions(reader.records)
    )
    # No message is taken for another's duplicate: every one is enriched once.
    assert got == sorted((m.tenant, m.device_id, m.message_id, "OUTCOME_ENRICHED") for m in msgs)
    events = [
        event_pb2.Event.FromString(m.value())
        for m in read_all(kafka_bootstrap, topics.event_topic("telemetry"))
    ]
    assert len({e.event_id for e in events}) == len(msgs)
    for e in events:
        # Each tenant's master data, never the other's.
        assert e.site == f"site-{e.tenant}"
        assert e.event_id == event_id(e.tenant, e.device_id, e.message_id, 0)
    states = {}
    for m in read_all(kafka_bootstrap, topics.state):
        s = device_state_pb2.DeviceState.FromString(m.value())
        assert m.key() == f"{s.tenant}/{s.device_id}".encode()
        states[m.key()] = s
    assert {k: s.message_count for k, s in states.items()} == {
        f"{t}/{d}".encode(): 2 for t in tenants for d in devices
    }
    reader.close()
