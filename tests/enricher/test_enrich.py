"""Enrichment and the keyed device state (the JVM operator) on small batch frames (no Kafka)."""

from __future__ import annotations

import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.testing import assertDataFrameEqual

from headwater.enricher.hop.timestamps import ms_of
from headwater.enricher.state import jvm_state
from headwater.enricher.state.policy import Policy
from headwater.enricher.topics import EnricherTopics
from headwater.proto.events.v1 import device_state_pb2, event_pb2
from headwater.proto.master.v1 import device_master_pb2
from tests.support.event_ids import event_id
from tests.support.kafkatools import ACME, ALARM, Msg, acme, envelope, ingest_headers

RAW = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
    "timestampType int, headers array<struct<key:string,value:binary>>"
)
T = EnricherTopics.with_prefix("u.")


def _jvm_event_id(spark, tenant: str, device: str, message: str, index: int) -> str:
    ids = spark.sparkContext._jvm.io.headwater.enricher.state.EventIds
    return ids.of(tenant, device, message, index)


@pytest.mark.spark
@pytest.mark.parametrize(
    "parts",
    [("t", "d", "m1", 0), ("", "dev-1", "", 7), ("té", 'd"q\\', "m\u2028\U0001f600", 2**30)],
)
def test_the_operators_event_id_is_exactly_uuid5_of_the_json_name(spark, parts) -> None:
    # Ids must not change across versions: replays and consumers' dedup rely on them.
    assert _jvm_event_id(spark, *parts) == event_id(*parts)


@pytest.mark.spark
@settings(max_examples=200, deadline=None)
@given(st.text(max_size=12), st.text(max_size=12), st.text(max_size=12), st.integers(0, 2**31 - 1))
def test_any_parts_give_the_defined_event_id(spark, tenant, device, message, index) -> None:
    assert _jvm_event_id(spark, tenant, device, message, index) == event_id(
        tenant, device, message, index
    )


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
    out = jvm_state.process_devices(raw, Policy(T, 3, 1000, 10_000, 60_000))
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
    (alarm,) = [e for e in events if e.message_id == "m2"]
    assert (alarm.alarm.code, alarm.alarm.severity, alarm.sequence) == ("E42", 2, 3)
    assert (alarm.device_time.ToMilliseconds(), alarm.received_time.ToMilliseconds()) == (
        11_000,
        1000,
    )
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
    ts = Timestamp()
    ts.FromMilliseconds(ms)
    assert ms_of(ts) == ts.ToMilliseconds()
