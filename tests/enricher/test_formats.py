"""Each vendor format as a unit: tolerant decoding, JSON decisions, Sparkplug B, OPC UA PubSub.

The Sparkplug B payloads are encoded by hand from the specification's field numbers
(tests/support/payloads.py: Eclipse Sparkplug 3.0, 6.4 "Payload"), not with our .proto, so a
wrong field number or type in proto/headwater/sparkplug/v1/sparkplug_b.proto fails these tests.
The OPC UA messages follow the layouts of OPC 10000-14, 7.2.5 (1.04 and 1.05 encodings).
"""

from __future__ import annotations

import json

import pytest

from headwater.enricher.hop.normalize import normalize_message
from tests.support.kafkatools import ACME, ALARM, GLOBEX, INITECH
from tests.support.payloads import BIRTH, DBIRTH, DDATA, OPCUA, SPB
from tests.support.payloads import opcua_network as _network
from tests.support.payloads import sparkplug_metric as _metric
from tests.support.payloads import sparkplug_payload as _payload

MEASURED = [
    {"name": "temperature", "value": 21.5, "unit": "celsius", "time_ms": None},
    {"name": "humidity", "value": 40.1, "unit": "percent", "time_ms": None},
    {"name": "voltage", "value": 3.3, "unit": "volt", "time_ms": None},
]


# --- tolerant decoding -------------------------------------------------------------------


@pytest.mark.parametrize(
    "payload",
    [
        b"294.65,0.401,3300",
        b"294.65,0.401,3300\r\n",
        b"\xef\xbb\xbf294.65,0.401,3300\r\n",
        b" 294.65 , 0.401 ,\t3300 \n",
        b"\r\n294.65,0.401,3300\r\n\r\n",
    ],
)
def test_csv_tolerates_bom_crlf_and_spaces(payload: bytes) -> None:
    assert normalize_message(INITECH, payload)["measurements"] == MEASURED


def test_csv_honours_the_charset_parameter() -> None:
    # UTF-16 with its own BOM: only readable when the charset is honoured.
    payload = "294.65,0.401,3300\r\n".encode("utf-16")
    assert normalize_message(INITECH, payload)["error_reason"] == "PAYLOAD_UNDECODABLE"
    out = normalize_message(INITECH + "; charset=UTF-16", payload)
    assert out["measurements"] == MEASURED


def test_an_unknown_charset_is_named() -> None:
    out = normalize_message(INITECH + "; charset=klingon", b"1,2,3")
    assert out["error_reason"] == "CHARSET_UNSUPPORTED"
    assert out["error_message"].startswith("unknown charset 'klingon' (supported: utf-8,")


def test_json_tolerates_a_bom() -> None:
    out = normalize_message(ACME, b'\xef\xbb\xbf{"temp_c": 21.5}')
    assert out["measurements"] == MEASURED[:1]


def test_json_with_duplicate_names_is_rejected() -> None:
    # RFC 8259 4: duplicates are unpredictable; one reader's first is another's last.
    out = normalize_message(ACME, b'{"temp_c": 21.5, "temp_c": 99}')
    assert out["error_reason"] == "PAYLOAD_UNDECODABLE"
    assert "duplicate name 'temp_c'" in out["error_message"]
    nested = b'{"readings": [{"k": "temperature", "v": 1, "v": 2, "u": "C"}]}'
    assert normalize_message(GLOBEX, nested)["error_reason"] == "PAYLOAD_UNDECODABLE"


@pytest.mark.parametrize(
    ("content_type", "payload", "field"),
    [
        (ACME, b'{"temp_c": NaN}', "temperature"),
        (ACME, b'{"hum_pct": Infinity}', "humidity"),
        (ACME, b'{"temp_c": -Infinity}', "temperature"),
        (ACME, b'{"temp_c": 1e999}', "temperature"),  # overflows a double
        (ACME, b'{"temp_c": 1' + b"0" * 400 + b"}", "temperature"),  # an integer beyond a double
        (GLOBEX, b'{"readings": [{"k": "pressure", "v": 1e308, "u": "kPa"}]}', "pressure"),
        (INITECH, b"nan,0.4,3300", "temperature"),
        (INITECH, b"294,inf,3300", "humidity"),
        (INITECH, b"294,0.4,1e999", "voltage"),
    ],
)
def test_non_finite_values_are_invalid_and_name_the_field(
    content_type: str, payload: bytes, field: str
) -> None:
    out = normalize_message(content_type, payload)
    assert out["error_reason"] == "PAYLOAD_INVALID"
    assert out["error_message"].startswith(f"{field}: ")


def test_a_plugin_that_returns_nan_is_caught_by_the_one_check(monkeypatch) -> None:
    from headwater.enricher.hop.formats import Measurement, Normalized, registry

    def sloppy(payload: bytes, media: object) -> Normalized:
        return Normalized("telemetry", "sloppy", [Measurement("flow", float("nan"), "")])

    monkeypatch.setitem(registry.REGISTRY, "application/x-sloppy", sloppy)
    out = normalize_message("application/x-sloppy", b"")
    assert (out["error_reason"], out["error_message"]) == (
        "PAYLOAD_INVALID",
        "flow: nan is not a finite number",
    )


def test_existing_formats_still_normalize() -> None:
    assert normalize_message(ALARM, b'{"code": "E1", "severity": "WARNING"}')["alarm_severity"] == 2


# Sparkplug B: the hop normalizes a message to its definitions and its readings (by name or
# by alias, with the units' conversions); the JVM operator keeps a device's definitions and
# resolves the readings against them (its SparkplugTest; end to end in
# test_formats_pipeline.py).


def _hop(content_type: str, payload: bytes) -> dict[str, object]:
    row = normalize_message(content_type, payload)
    assert not row.get("error_reason"), row
    return row


def _readings(row: dict[str, object]) -> list[tuple[object, ...]]:
    pending = row["pending"]
    assert isinstance(pending, list)
    return [
        (p["alias"], p["name"], p["value"], p["unit"], p["time_ms"], p["datatype"]) for p in pending
    ]


def test_sparkplug_birth_defines_metrics_and_states_its_readings() -> None:
    row = _hop(DBIRTH, BIRTH)
    t = 1_700_000_000_000
    assert row["replaces_definitions"] is True
    definitions = row["definitions"]
    assert isinstance(definitions, list)
    assert [(d["alias"], d["name"], d["datatype"]) for d in definitions] == [
        (i, n, dt)
        for i, (n, dt) in enumerate(
            [
                ("Temp", 9),
                ("Pressure", 10),
                ("Offset", 2),
                ("Running", 11),
                ("Serial", 12),
                ("Counter", 4),
                ("Spare", 10),
                ("Started", 13),
            ],
            1,
        )
    ]
    # Typed readings are read here (two's complement, booleans); strings, nulls and
    # DateTimes are no measurements.
    assert _readings(row) == [
        (1, "Temp", 70.7, "°F", t, 9),
        (2, "Pressure", 1013.25, "hPa", t, 10),
        (3, "Offset", -2.0, "", t, 2),
        (4, "Running", 1.0, "", t, 11),
        (6, "Counter", -5.0, "", t, 4),
    ]
    assert row["units"] == [
        {"spelling": "hPa", "canonical": "pascal", "scale": 100.0, "offset": 0.0, "error": ""},
        {
            "spelling": "°F",
            "canonical": "celsius",
            "scale": 0.5555555555555429,
            "offset": -17.777777777777743,
            "error": "",
        },
    ]


def test_sparkplug_data_by_alias_leaves_name_type_and_unit_to_the_birth() -> None:
    data = _payload(
        _metric(alias=1, ts=1_700_000_005_000, float_value=212.0),  # per-metric timestamp
        _metric(alias=3, int_value=0xFFFF),  # no datatype: the birth's Int16 reads it
        _metric(alias=8, long_value=1_700_000_000_000),  # the birth's DateTime drops it
        _metric(alias=2, is_null=True),  # null: no reading
        ts=1_700_000_001_000,
    )
    row = _hop(DDATA, data)
    assert row["replaces_definitions"] is False
    assert _readings(row) == [
        (1, "", 212.0, "", 1_700_000_005_000, 0),
        (3, "", 65535.0, "", 1_700_000_001_000, 0),
        (8, "", 1_700_000_000_000.0, "", 1_700_000_001_000, 0),
    ]
    assert row["units"] == []


def test_sparkplug_rebirth_replaces_the_definitions_with_its_units() -> None:
    rebirth = _payload(_metric("Flow", alias=1, datatype=10, unit="l/min", double_value=6))
    row = _hop(DBIRTH, rebirth)
    assert row["replaces_definitions"] is True
    units = row["units"]
    assert isinstance(units, list)
    (flow,) = units
    assert flow["canonical"] == "cubic_meter_per_second"
    assert round(60.0 * flow["scale"] + flow["offset"], 12) == 0.001  # 60 l/min in m³/s


@pytest.mark.parametrize(
    ("content_type", "payload", "reason", "says"),
    [
        (SPB, b"\xff\xff\xff", "PAYLOAD_UNDECODABLE", "not a Sparkplug B payload"),
        (DBIRTH, _payload(_metric(alias=1, double_value=1.0)), "PAYLOAD_INVALID", "needs a name"),
        (DDATA, _payload(_metric(double_value=1.0)), "PAYLOAD_INVALID", "neither name nor alias"),
        (SPB + "; message-type=BOGUS", _payload(), "PAYLOAD_INVALID", "BOGUS"),
        (DDATA, _payload(_metric("x", double_value=float("nan"))), "PAYLOAD_INVALID", "x: nan"),
        (DDATA, _payload(_metric("t", ts=2**63, double_value=1.0)), "PAYLOAD_INVALID", "t: time"),
        (DDATA, _payload(_metric("u", unit="wibbles", double_value=1.0)), None, None),
    ],
)
def test_sparkplug_bad_payloads(content_type: str, payload: bytes, reason, says) -> None:
    out = normalize_message(content_type, payload)
    if reason is None:  # the JVM operator dead-letters the reading as it resolves it
        assert "error_reason" not in out
        (unit,) = out["units"]
        assert unit["spelling"] == "wibbles"
        assert unit["error"] == "unknown unit 'wibbles'"
        return
    assert out["error_reason"] == reason
    assert says in out["error_message"]


def test_opcua_network_message_with_two_data_set_messages() -> None:
    payload = _network(
        {
            "DataSetWriterId": 1,
            "SequenceNumber": 224,
            "MetaDataVersion": {"MajorVersion": 1, "MinorVersion": 1},
            "Timestamp": "2023-11-14T22:13:20.1234567Z",
            "MessageType": "ua-keyframe",
            "Payload": {
                "Temperature": {"Type": 11, "Body": 21.5},  # 1.04 Variant
                "Count": {"Type": 8, "Body": "-9007199254740993"},  # Int64 as a string
                "Name": {"Type": 12, "Body": "oven"},  # String: not a measurement
                "Raw": 7,  # RawData field encoding
                "On": {"Type": 1, "Body": True},
            },
        },
        {
            "DataSetWriterId": 2,
            "Payload": {
                # 1.04 DataValue with a Bad status (BadSensorFailure): not a measurement.
                "Broken": {"Value": {"Type": 11, "Body": 99.0}, "Status": 0x808B0000},
                # 1.05 DataValue: flattened Variant + StatusCode object + source time.
                "Speed": {
                    "UaType": 10,
                    "Value": 1.5,
                    "StatusCode": {"Code": 0x40000000, "Symbol": "Uncertain"},
                    "SourceTimestamp": "2023-11-14T22:13:21Z",
                },
                "Gone": {"UaType": 11, "Value": 3.0, "StatusCode": {"Code": 2150891520}},
            },
        },
    )
    out = normalize_message(OPCUA, payload)
    t = 1_700_000_000_123
    assert out["source_format"] == "opcua.pubsub+json"
    assert [(m["name"], m["value"], m["time_ms"]) for m in out["measurements"]] == [
        ("Temperature", 21.5, t),
        ("Count", -9007199254740992.0, t),
        ("Raw", 7.0, t),
        ("On", 1.0, t),
        ("Speed", 1.5, 1_700_000_001_000),
    ]
    assert {m["unit"] for m in out["measurements"]} == {""}


def test_opcua_engineering_units_of_a_data_value_are_its_unit_converted() -> None:
    # UNECE's code FAH as OPC 10000-8 numbers it: the letters' bytes.
    fahrenheit = {"NamespaceUri": "http://www.opcfoundation.org/UA/units/un/cefact",
                  "UnitId": 4604232, "DisplayName": {"Locale": "en", "Text": "°F"}}  # fmt: skip
    payload = _network(
        {
            "Timestamp": "2023-11-14T22:13:20Z",
            "Payload": {
                # A 1.04 DataValue as the gateway's OPC UA connector writes it.
                "Temperature": {
                    "Value": {"Type": 11, "Body": 70.7},
                    "EngineeringUnits": fahrenheit,
                },
                # 1.05, with the LocalizedText as its text alone (1.04 non-reversible).
                "Pressure": {
                    "UaType": 11,
                    "Value": 1013.25,
                    "EngineeringUnits": {"DisplayName": "hPa"},
                },
                "Count": {"Value": {"Type": 6, "Body": 3}, "EngineeringUnits": {"UnitId": 1}},
            },
        }
    )
    out = normalize_message(OPCUA, payload)
    assert [(m["name"], m["value"], m["unit"]) for m in out["measurements"]] == [
        ("Temperature", 21.5, "celsius"),
        ("Pressure", 101_325.0, "pascal"),
        ("Count", 3.0, ""),  # no display name: no unit
    ]


def test_opcua_bad_data_set_status_drops_the_whole_message_and_keepalives_are_empty() -> None:
    payload = _network(
        {"DataSetWriterId": 1, "Status": 0x80000000, "Payload": {"X": 1.0}},
        {"DataSetWriterId": 2, "MessageType": "ua-keepalive"},
    )
    assert normalize_message(OPCUA, payload)["measurements"] == []


def test_opcua_without_network_header_is_an_array_of_data_set_messages() -> None:
    payload = json.dumps([{"Payload": {"A": 1}}, {"Payload": {"B": {"Type": 6, "Body": -3}}}])
    out = normalize_message(OPCUA, payload.encode())
    assert [(m["name"], m["value"]) for m in out["measurements"]] == [("A", 1.0), ("B", -3.0)]


@pytest.mark.parametrize(
    ("payload", "reason", "says"),
    [
        (_network({"Payload": {"T": {"Type": 11, "Body": "NaN"}}}), "PAYLOAD_INVALID", "T: nan"),
        (
            _network({"Payload": {"T": {"Type": 6, "Body": 1.5}}}),
            "PAYLOAD_INVALID",
            "match its type",
        ),
        (_network({"Timestamp": "yesterday", "Payload": {}}), "PAYLOAD_INVALID", "bad timestamp"),
        (b'{"MessageType": "ua-data"}', "PAYLOAD_INVALID", "expected Messages"),
        (b'{"MessageType": "ua-other", "Messages": []}', "PAYLOAD_INVALID", "not ua-data"),
        (b"[1]", "PAYLOAD_INVALID", "not an object"),
        (b"{", "PAYLOAD_UNDECODABLE", "not JSON"),
        (
            _network({"Payload": {"T": {"Value": 1.0, "EngineeringUnits": {"DisplayName": 7}}}}),
            "PAYLOAD_INVALID",
            "T.EngineeringUnits: {'DisplayName': 7} is no EUInformation",
        ),
        (
            _network(
                {"Payload": {"T": {"Value": 1.0, "EngineeringUnits": {"DisplayName": "dBm"}}}}
            ),
            "UNIT_UNKNOWN",
            "T: unit 'dBm' is logarithmic",
        ),
    ],
)
def test_opcua_bad_payloads(payload: bytes, reason: str, says: str) -> None:
    out = normalize_message(OPCUA, payload)
    assert out["error_reason"] == reason
    assert says in out["error_message"]


@pytest.mark.parametrize(
    ("payload", "says"),
    [
        (b"1," + b"9" * 200_000 + b",3", "a line of 200004 characters"),  # found by the fuzz check
        (b'1,"2,3', None),  # an unterminated quote: csv reads to the end; still not 3 numbers
    ],
)
def test_csv_lines_beyond_the_format_are_payload_invalid(payload: bytes, says: str | None) -> None:
    out = normalize_message(INITECH, payload)
    assert out["error_reason"] == "PAYLOAD_INVALID", out
    if says:
        assert says in out["error_message"]
