"""Each normalizer as a unit, and the decode/normalize steps on small batch frames."""

from __future__ import annotations

import json

import pytest
from pyspark.testing import assertDataFrameEqual

from headwater.enricher.decode import decode, decode_record
from headwater.enricher.normalize import REGISTRY, normalize, normalize_message
from tests.enricher.kafkatools import (
    ACME,
    ALARM,
    GLOBEX,
    INITECH,
    Msg,
    acme,
    envelope,
    ingest_headers,
)


def test_acme_telemetry_is_celsius_and_percent() -> None:
    out = normalize_message(ACME, acme(21.5, 40.1))
    assert out["event_type"] == "telemetry"
    assert out["measurements"] == [
        {"name": "temperature", "value": 21.5, "unit": "celsius", "time_ms": None},
        {"name": "humidity", "value": 40.1, "unit": "percent", "time_ms": None},
    ]


def test_globex_converts_fahrenheit_psi_and_accepts_c_kpa() -> None:
    doc = {
        "readings": [
            {"k": "temperature", "v": 70.7, "u": "F"},
            {"k": "pressure", "v": 14.7, "u": "psi"},
            {"k": "temperature", "v": 20.0, "u": "C"},
            {"k": "pressure", "v": 101.3, "u": "kPa"},
        ]
    }
    out = normalize_message(GLOBEX, json.dumps(doc).encode())
    assert out["measurements"] == [
        {"name": "temperature", "value": 21.5, "unit": "celsius", "time_ms": None},
        {"name": "pressure", "value": 101352.93221, "unit": "pascal", "time_ms": None},
        {"name": "temperature", "value": 20.0, "unit": "celsius", "time_ms": None},
        {"name": "pressure", "value": 101300.0, "unit": "pascal", "time_ms": None},
    ]
    assert out["source_format"] == "globex.telemetry.v2+json"


def test_initech_csv_kelvin_ratio_millivolt() -> None:
    out = normalize_message(INITECH, b"294.65,0.401,3300\n")
    assert out["measurements"] == [
        {"name": "temperature", "value": 21.5, "unit": "celsius", "time_ms": None},
        {"name": "humidity", "value": 40.1, "unit": "percent", "time_ms": None},
        {"name": "voltage", "value": 3.3, "unit": "volt", "time_ms": None},
    ]


def test_acme_alarm() -> None:
    out = normalize_message(
        ALARM, b'{"code": "E42", "severity": "critical", "text": "spindle hot"}'
    )
    assert (out["event_type"], out["alarm_code"], out["alarm_severity"], out["alarm_text"]) == (
        "alarm",
        "E42",
        3,
        "spindle hot",
    )
    assert out["measurements"] == []


@pytest.mark.parametrize(
    ("content_type", "payload", "reason"),
    [
        ("application/x-unknown", b"{}", "UNKNOWN_FORMAT"),
        (ACME, b"\xff\xfe not json {", "PAYLOAD_UNDECODABLE"),
        (ACME, b'{"temp_c": "hot"}', "PAYLOAD_INVALID"),
        (ACME, b"[]", "PAYLOAD_INVALID"),
        (GLOBEX, b'{"readings": [{"k": "temperature", "v": 1, "u": "R"}]}', "UNIT_UNKNOWN"),
        ("application json", b"{}", "CONTENT_TYPE_INVALID"),
        (ACME, b'{"temp_c": NaN}', "PAYLOAD_INVALID"),
        (GLOBEX, b'{"readings": []}', "PAYLOAD_INVALID"),
        (INITECH, b"1,2", "PAYLOAD_INVALID"),
        (INITECH, b"a,b,c", "PAYLOAD_UNDECODABLE"),
        (ALARM, b'{"severity": "info"}', "PAYLOAD_INVALID"),
    ],
)
def test_bad_payloads_are_errors_not_raises(content_type: str, payload: bytes, reason: str) -> None:
    out = normalize_message(content_type, payload)
    assert out["error_reason"] == reason
    assert out["error_stage"] == "normalize"


def test_registry_covers_the_fleet_formats() -> None:
    from headwater.devstack import vendors

    for ct in (*vendors.TELEMETRY_FORMATS, vendors.ACME_ALARM):
        assert ct in REGISTRY


def test_decode_record_rejects_garbage_and_keeps_the_key() -> None:
    out = decode_record("ingest", b"dev-9", b"\xff\xff garbage", [], "master")
    assert out["error_reason"] in ("ENVELOPE_UNDECODABLE", "ENVELOPE_INVALID")
    assert out["device_key"] == "dev-9"


def _raw(spark, rows):
    schema = (
        "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
        "timestampType int, headers array<struct<key:string,value:binary>>"
    )
    return spark.createDataFrame(rows, schema)


@pytest.mark.spark
def test_decode_then_normalize_on_a_batch_frame(spark) -> None:
    good = Msg("m1", "dev-1", INITECH, b"294.65,0.401,3300", sequence=7)
    unknown = Msg("m2", "dev-2", "text/x-unknown", b"?")
    rows = [
        (b"dev-1", envelope(good), "in", 0, 0, None, 0, ingest_headers(good, 1000)),
        (b"dev-2", envelope(unknown), "in", 0, 1, None, 0, ingest_headers(unknown, 1000)),
        (b"dev-3", b"\x0a\xff", "in", 1, 0, None, 0, []),
    ]
    out = normalize(decode(_raw(spark, rows), "master"))
    got = out.select(
        "src_offset",
        "device_key",
        "message_id",
        "sequence",
        "received_ms",
        "event_type",
        "measurements",
        "error_stage",
        "error_reason",
    )
    m = [
        ("temperature", 21.5, "celsius", None),
        ("humidity", 40.1, "percent", None),
        ("voltage", 3.3, "volt", None),
    ]
    expected = spark.createDataFrame(
        [
            (0, "dev-1", "m1", 7, 1000, "telemetry", m, None, None),
            (1, "dev-2", "m2", 1, 1000, None, None, "normalize", "UNKNOWN_FORMAT"),
            (0, "dev-3", "", None, 0, None, None, "decode", "ENVELOPE_UNDECODABLE"),
        ],
        got.schema,
    )
    assertDataFrameEqual(got, expected)


def test_the_fleet_has_devices_of_every_format_and_they_normalize() -> None:
    import random

    from headwater.devstack import vendors
    from headwater.devstack.fleet import build_fleet
    from headwater.enricher.births import Definitions, apply_to_row

    fleet = build_fleet(2, 5, random.Random(1))
    spoken = {d.content_type for gw in fleet for d in gw.devices}
    assert set(vendors.TELEMETRY_FORMATS) <= spoken
    r = vendors.random_reading(random.Random(2))
    defs = Definitions()
    birth = normalize_message(vendors.SPARKPLUG_BIRTH, vendors.sparkplug_payload(r, birth=True))
    apply_to_row(birth, defs)
    data = normalize_message(vendors.SPARKPLUG_DATA, vendors.sparkplug_payload(r, birth=False))
    got = {m["name"]: m["value"] for m in apply_to_row(data, defs)["measurements"]}
    assert got == {
        "Process/Temperature": r.temperature_c,
        "Process/Pressure": r.pressure_pa,
        "Supply/Voltage": r.voltage_v,
    }
    opc = normalize_message(vendors.OPCUA_PUBSUB, vendors.opcua_payload(r))
    assert [m["value"] for m in opc["measurements"]] == [
        r.temperature_c,
        r.humidity_pct,
        r.pressure_pa,
    ]
