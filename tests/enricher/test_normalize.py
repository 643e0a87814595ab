"""Each normalizer as a unit, and the decode/normalize steps on small batch frames."""

from __future__ import annotations

import json

import pytest

from headwater import record_headers as rh
from headwater.enricher.hop.decode import (
    decode_for_key,
    decode_record,
    normalizable,
)
from headwater.enricher.hop.normalize import REGISTRY, normalize_batch, normalize_message
from headwater.enricher.hop.schema import KEYED, field_names
from headwater.enricher.source.keys import key_columns
from headwater.topics import split_scoped_key
from tests.support.kafkatools import (
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
    from headwater_dev.devstack import vendors

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
def test_keys_come_from_the_jvm_and_rows_decode_and_normalize(spark) -> None:
    good = Msg("m1", "dev-1", INITECH, b"294.65,0.401,3300", sequence=7)
    unknown = Msg("m2", "dev-2", "text/x-unknown", b"?")
    other_key = Msg("m4", "dev-4", INITECH, b"294.65,0.401,3300")
    bad_tenant = [(rh.TENANT, b"t\xff"), (rh.TENANT, b"acme")]  # the last header wins
    rows = [
        (b"dev-1", envelope(good), "in", 0, 0, None, 0, ingest_headers(good, 1000)),
        (b"dev-2", envelope(unknown), "in", 0, 1, None, 0, ingest_headers(unknown, 1000)),
        (b"dev-3", b"\x0a\xff", "in", 1, 0, None, 0, [(rh.TENANT, b"t\xff")]),
        (b"dev-7", b"\x0a\xff", "in", 1, 2, None, 0, []),  # no tenant header at all
        (b"not-dev-4", envelope(other_key), "in", 1, 1, None, 0, bad_tenant),
        (b"acme/a/dev-5", b"", "master", 0, 0, None, 0, []),
        (b"dev-6", b"", "master", 0, 1, None, 0, []),
        (None, b"", "master", 0, 2, None, 0, []),
        (b"dev-8", b"\x0a\xff", "in", 1, 3, None, 0, [(rh.TENANT, None)]),  # no value
    ]
    keyed_df = key_columns(_raw(spark, rows), "master")
    assert keyed_df.columns == field_names(KEYED)  # the columns the JVM operator reads
    keyed = keyed_df.collect()
    # The JVM splits master keys as split_scoped_key does, and decodes text as Python.
    assert [(r.tenant, r.device_key) for r in keyed] == [
        ("acme-tenant", "dev-1"),
        ("acme-tenant", "dev-2"),
        ("t\ufffd", "dev-3"),
        ("", "dev-7"),
        ("acme", "not-dev-4"),
        split_scoped_key("acme/a/dev-5"),
        split_scoped_key("dev-6"),
        ("", ""),
        ("", "dev-8"),
    ]
    from headwater.enricher.state.jvm_state import decode

    hopped = decode(keyed_df, "master").collect()
    got = [r.asDict(recursive=True) for r in hopped[:3] + hopped[4:5]]
    assert [(m["src_offset"], m["message_id"], m["sequence"]) for m in got] == [
        (0, "m1", 7),
        (1, "m2", 1),
        (0, "", None),
        (1, "m4", 1),
    ]
    assert got[0]["event_type"] == "telemetry" and got[0]["error_reason"] is None
    assert [(m["name"], m["unit"]) for m in got[0]["measurements"]] == [
        ("temperature", "celsius"),
        ("humidity", "percent"),
        ("voltage", "volt"),
    ]
    assert [(m["error_stage"], m["error_reason"]) for m in got[1:]] == [
        ("normalize", "UNKNOWN_FORMAT"),
        ("decode", "ENVELOPE_UNDECODABLE"),
        ("decode", "ENVELOPE_INVALID"),  # the record key is not the envelope's device id
    ]
    assert "not-dev-4" in got[3]["error_message"]


def test_the_fleet_has_devices_of_every_format_and_they_normalize() -> None:
    import random

    from headwater_dev.devstack import vendors
    from headwater_dev.devstack.fleet import build_fleet

    fleet = build_fleet(2, 5, random.Random(1))
    spoken = {d.content_type for gw in fleet for d in gw.devices}
    assert set(vendors.TELEMETRY_FORMATS) <= spoken
    r = vendors.random_reading(random.Random(2))
    # Sparkplug B: the birth names the aliases and states its readings with their units'
    # conversions; the data sends the same aliases (the JVM operator resolves them).
    birth = normalize_message(vendors.SPARKPLUG_BIRTH, vendors.sparkplug_payload(r, birth=True))
    convert = {u["spelling"]: u for u in birth["units"]}
    got = {
        p["name"]: round(p["value"] * convert[p["unit"]]["scale"] + convert[p["unit"]]["offset"], 9)
        for p in birth["pending"]
    }
    assert got == {
        "Process/Temperature": r.temperature_c,
        "Process/Pressure": r.pressure_pa,
        "Supply/Voltage": r.voltage_v,
    }
    data = normalize_message(vendors.SPARKPLUG_DATA, vendors.sparkplug_payload(r, birth=False))
    names = {d["alias"]: d["name"] for d in birth["definitions"]}
    assert [names[p["alias"]] for p in data["pending"]] == list(got)
    assert [p["value"] for p in data["pending"]] == [p["value"] for p in birth["pending"]]
    opc = normalize_message(vendors.OPCUA_PUBSUB, vendors.opcua_payload(r))
    assert [m["value"] for m in opc["measurements"]] == [
        r.temperature_c,
        r.humidity_pct,
        r.pressure_pa,
    ]


def test_a_batch_normalizes_each_message_as_it_would_alone() -> None:
    # Grouped by media type inside, in the batch's order outside: the recorded corpus,
    # shuffled so that formats interleave, plus bad media types.
    import random

    from headwater.proto.device.v1.device_message_pb2 import DeviceMessage
    from tests.enricher.corpus import corpus

    pairs: list[tuple[str | None, bytes | None]] = []
    for _key, value, topic, *_ in corpus(("telemetry", "alarms"), "master"):
        if topic != "master":
            try:
                m = DeviceMessage.FromString(value)
            except Exception:
                continue
            pairs.append((m.content_type, m.payload))
    pairs += [("not a media type", b"{}"), (None, None), ("text/x-unknown", b"?")]
    random.Random(5).shuffle(pairs)
    assert len({ct for ct, _ in pairs}) >= 8
    assert normalize_batch(pairs) == [normalize_message(ct, p) for ct, p in pairs]


def _alone(row: tuple) -> dict:
    """Return one keyed row decoded with all its headers and normalized on its own."""
    _tenant, key, topic, _partition, _offset, value, headers = row
    msg = decode_for_key(topic, key, value, headers, "master")
    if normalizable(msg):
        msg |= normalize_message(msg["content_type"], msg["payload"])
    return msg


@pytest.mark.spark
def test_the_hop_decodes_as_one_row_would_and_leaves_the_keyed_columns_alone(spark) -> None:
    from headwater.enricher.hop.arrow_hop import HOP
    from headwater.enricher.state.jvm_state import decode

    good = Msg("m1", "dev-1", INITECH, b"294.65,0.401,3300", sequence=7)
    bad = Msg("m2", "dev-2", "text/x-unknown", b"?")
    # The last header of a name wins, a header without a value reads as empty.
    repeated = [*ingest_headers(good, 1000), (rh.GATEWAY_ID, b"gw-last"), (rh.RECEIVED_AT_MS, None)]
    keyed_rows = [
        ("acme", "dev-1", "in", 0, 0, envelope(good), ingest_headers(good, 1000)),
        ("acme", "dev-1", "in", 0, 1, envelope(good), repeated),
        ("acme", "dev-2", "in", 1, 5, envelope(bad), ingest_headers(bad, 1000)),
        ("acme", "dev-3", "master", 0, 9, None, None),  # a tombstone: no value, no headers
        ("", "dev-4", "in", 0, 1, b"\x0a\xff", []),
        ("acme", "dev-9", "in", 0, 2, envelope(good), ingest_headers(good, 1000)),  # key != id
    ]
    out = decode(spark.createDataFrame(keyed_rows, KEYED), "master").collect()
    names = field_names(KEYED)
    for row, got in zip(keyed_rows, out, strict=True):
        got = got.asDict(recursive=True)
        headers = [(h["key"], h["value"]) for h in got["headers"]] if got["headers"] else None
        assert [got[n] for n in names[:-1]] + [headers] == [*row[:-1], row[-1] or None]
        want = _alone(row)
        hop = {n: got[n] for n in field_names(HOP) if n != "units"}
        assert hop == {n: want.get(n) for n in hop}
    assert out[1]["gateway_id"] == "gw-last" and out[1]["received_ms"] == 0
    assert out[5]["error_reason"] == "ENVELOPE_INVALID"
