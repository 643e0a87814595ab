"""Enrichment and the keyed device state on small batch frames (no Kafka)."""

from __future__ import annotations

import json
import uuid

import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from pyspark.testing import assertDataFrameEqual

from headwater.enricher.driver.settings import EnricherTopics
from headwater.enricher.executor.decode import key_columns
from headwater.enricher.executor.timestamps import ms_of, set_ms
from headwater.enricher.python_operator.enrich import EVENT_ID_NAMESPACE, build_events, event_id
from headwater.enricher.python_operator.state import Policy, process_devices
from headwater.proto.events.v1 import device_state_pb2, event_pb2
from headwater.proto.master.v1 import device_master_pb2
from tests.support.kafkatools import ACME, ALARM, Msg, acme, envelope, ingest_headers

RAW = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
    "timestampType int, headers array<struct<key:string,value:binary>>"
)
T = EnricherTopics.with_prefix("u.")


def test_event_id_is_stable_uuid5() -> None:
    assert event_id("t", "d", "m1", 0) == event_id("t", "d", "m1", 0)
    assert event_id("t", "d", "m1", 0) != event_id("t", "d", "m1", 1)
    assert event_id("t", "d", "m1", 0)[14] == "5"  # version nibble


@pytest.mark.parametrize(
    "parts",
    [("t", "d", "m1", 0), ("", "dev-1", "", 7), ("té", 'd"q\\', "m\u2028\U0001f600", 2**40)],
)
def test_event_id_is_exactly_uuid5_of_the_json_name(parts: tuple[str, str, str, int]) -> None:
    # Ids must not change across versions: replays and consumers' dedup rely on them.
    name = json.dumps(list(parts), separators=(",", ":"))
    assert event_id(*parts) == str(uuid.uuid5(EVENT_ID_NAMESPACE, name))


def test_event_id_is_scoped_by_tenant_and_device() -> None:
    # Message ids are unique per tenant and device only: counters are fine.
    ids = {event_id(t, d, "1", 0) for t in ("ta", "tb") for d in ("d1", "d2")}
    assert len(ids) == 4
    # Parts cannot be shifted into one another to forge a collision.
    assert event_id("a/b", "c", "m", 0) != event_id("a", "b/c", "m", 0)


def test_build_events_copies_master_data_and_alarm() -> None:
    msg = {
        "message_id": "m9",
        "device_id": "d",
        "event_type": "alarm",
        "tenant": "t",
        "gateway_id": "g",
        "sequence": 3,
        "source_format": "acme.alarm.v1+json",
        "device_time_ms": 5000,
        "received_ms": 6000,
        "measurements": [],
        "alarm_code": "E42",
        "alarm_severity": 3,
        "alarm_text": "hot",
    }
    (ev,) = build_events(msg, {"site": "plant-1", "area_code": "A7"})
    assert (ev.site, ev.area_code, ev.alarm.code, ev.alarm.severity) == ("plant-1", "A7", "E42", 3)
    assert ev.device_time.ToMilliseconds() == 5000
    assert ev.event_id == event_id("t", "d", "m9", 0)


def _master(device: str, offset: int) -> tuple:
    value = device_master_pb2.DeviceMaster(
        device_id=device, site="plant-1", area_code="A1", tenant="acme-tenant"
    ).SerializeToString()
    return (f"acme-tenant/{device}".encode(), value, T.master, 0, offset, None, 0, [])


def _ingest(m: Msg, offset: int) -> tuple:
    topic = T.ingest[1] if m.endpoint == "alarms" else T.ingest[0]
    return (m.device_id.encode(), envelope(m), topic, 0, offset, None, 0, ingest_headers(m, 1000))


@pytest.mark.spark
def test_enrichment_dedupe_and_parking_on_a_batch_frame(spark) -> None:
    m1 = Msg("m1", "dev-1", ACME, acme(21.5, 40.1), sequence=1, device_time_ms=10_000)
    m2 = Msg("m2", "dev-1", ALARM, b'{"code":"E42","severity":"warning"}', 3, 11_000, "alarms")
    rows = [
        _master("dev-1", 0),
        _ingest(m1, 0),
        _ingest(m1, 1),  # a resend: DUPLICATE
        _ingest(m2, 0),
        _ingest(Msg("m3", "dev-2", ACME, acme(1, 2)), 2),  # no master data: parked
    ]
    raw = spark.createDataFrame(rows, RAW)
    out = process_devices(key_columns(raw, T.master), Policy(T, 3, 1000, 10_000, 60_000))
    out = out.cache()
    got = out.select("topic", "role", "label", "event_id")
    expected = spark.createDataFrame(
        [
            (
                T.event_topic("telemetry"),
                "event",
                "telemetry",
                event_id("acme-tenant", "dev-1", "m1", 0),
            ),
            (T.completions, "completion", "ENRICHED", None),
            (T.completions, "completion", "DUPLICATE", None),
            (T.event_topic("alarm"), "event", "alarm", event_id("acme-tenant", "dev-1", "m2", 0)),
            (T.completions, "completion", "ENRICHED", None),
            (T.state, "state", "snapshot", None),
            (T.retry, "retry", "MASTER_DATA_MISSING", None),
            (T.completions, "completion", "RETRY_SCHEDULED", None),
        ],
        got.schema,
    )
    assertDataFrameEqual(got, expected)
    events = [event_pb2.Event.FromString(r.value) for r in out.where("role = 'event'").collect()]
    assert {(e.message_id, e.site, e.area_code, e.tenant) for e in events} == {
        ("m1", "plant-1", "A1", "acme-tenant"),
        ("m2", "plant-1", "A1", "acme-tenant"),
    }
    (snap_row,) = out.where("role = 'state'").collect()
    snap = device_state_pb2.DeviceState.FromString(snap_row.value)
    assert (snap.device_id, snap.message_count, snap.last_sequence, snap.gaps_detected) == (
        "dev-1",
        2,
        3,
        1,
    )
    assert snap.last_message_id == "m2"
    assert [(v.name, v.value, v.unit) for v in snap.latest_values] == [
        ("humidity", 40.1, "percent"),
        ("temperature", 21.5, "celsius"),
    ]
    out.unpersist()


@pytest.mark.parametrize("ms", [0, 1, -1, -1001, 999, 1_700_000_000_123, -62_135_596_800_000])
def test_timestamps_match_the_protobuf_library(ms: int) -> None:
    expected = Timestamp()
    expected.FromMilliseconds(ms)
    written = Timestamp()
    set_ms(written, ms)
    assert written == expected
    assert ms_of(written) == expected.ToMilliseconds()
