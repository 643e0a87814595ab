"""Payloads in the vendor formats the simulated fleet speaks (and the enricher reads)."""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass

from headwater.proto.sparkplug.v1 import sparkplug_b_pb2 as spb

ACME_TELEMETRY = "application/vnd.acme.telemetry.v1+json"
GLOBEX_TELEMETRY = "application/vnd.globex.telemetry.v2+json"
INITECH_TELEMETRY = "text/vnd.initech.telemetry.v1+csv"
ACME_ALARM = "application/vnd.acme.alarm.v1+json"
#: Sparkplug B: the MQTT topic's message type travels as a media type parameter.
SPARKPLUG_B = "application/vnd.eclipse.sparkplug.b+protobuf"
SPARKPLUG_BIRTH = SPARKPLUG_B + "; message-type=DBIRTH"
SPARKPLUG_DATA = SPARKPLUG_B + "; message-type=DDATA"
OPCUA_PUBSUB = "application/vnd.opcfoundation.uapubsub+json"
TELEMETRY_FORMATS = (
    ACME_TELEMETRY,
    GLOBEX_TELEMETRY,
    INITECH_TELEMETRY,
    SPARKPLUG_B,
    OPCUA_PUBSUB,
)
#: Sparkplug B metrics of the simulated devices: (name, alias, datatype, engineering unit).
SPARKPLUG_METRICS = (
    ("Process/Temperature", 1, spb.DATA_TYPE_FLOAT, "°C"),
    ("Process/Pressure", 2, spb.DATA_TYPE_DOUBLE, "hPa"),
    ("Supply/Voltage", 3, spb.DATA_TYPE_INT32, "mV"),
)


@dataclass(frozen=True)
class Reading:
    """The true physical values behind a payload, in canonical units."""

    temperature_c: float
    humidity_pct: float
    pressure_pa: float
    voltage_v: float


def random_reading(rng: random.Random) -> Reading:
    """Return plausible factory-floor values."""
    return Reading(
        temperature_c=round(rng.uniform(15, 35), 2),
        humidity_pct=round(rng.uniform(20, 70), 1),
        pressure_pa=round(rng.uniform(99_000, 103_000), 0),
        voltage_v=round(rng.uniform(3.0, 3.6), 3),
    )


def telemetry_payload(content_type: str, r: Reading) -> bytes:
    """Encode ``r`` as the given vendor would."""
    if content_type == ACME_TELEMETRY:
        return json.dumps({"temp_c": r.temperature_c, "hum_pct": r.humidity_pct}).encode()
    if content_type == GLOBEX_TELEMETRY:
        fahrenheit = round(r.temperature_c * 9 / 5 + 32, 3)
        psi = round(r.pressure_pa / 6894.757, 5)
        readings = [
            {"k": "temperature", "v": fahrenheit, "u": "F"},
            {"k": "pressure", "v": psi, "u": "psi"},
        ]
        return json.dumps({"readings": readings}).encode()
    if content_type == INITECH_TELEMETRY:
        kelvin = round(r.temperature_c + 273.15, 2)
        return f"{kelvin},{r.humidity_pct / 100:.4f},{round(r.voltage_v * 1000)}".encode()
    if content_type in (SPARKPLUG_B, SPARKPLUG_DATA):
        return sparkplug_payload(r, birth=False)
    if content_type == OPCUA_PUBSUB:
        return opcua_payload(r)
    raise ValueError(f"unknown telemetry format {content_type!r}")


def _sparkplug_values(r: Reading) -> tuple[float, float, int]:
    return r.temperature_c, r.pressure_pa / 100.0, round(r.voltage_v * 1000)


def sparkplug_payload(r: Reading, birth: bool, now_ms: int | None = None) -> bytes:
    """Encode ``r`` as a Sparkplug B DBIRTH (names, aliases, types, units) or DDATA (aliases).

    The DDATA carries only aliases and values, as edge nodes send them to save bytes: the
    enricher resolves them from the device's DBIRTH.
    """
    now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
    p = spb.Payload(timestamp=now_ms, seq=0)
    for (name, alias, datatype, unit), value in zip(
        SPARKPLUG_METRICS, _sparkplug_values(r), strict=True
    ):
        m = p.metrics.add(alias=alias, timestamp=now_ms)
        if birth:
            m.name, m.datatype = name, datatype
            m.properties.keys.append("engUnit")
            m.properties.values.add(type=spb.DATA_TYPE_STRING, string_value=unit)
        if datatype == spb.DATA_TYPE_FLOAT:
            m.float_value = value
        elif datatype == spb.DATA_TYPE_DOUBLE:
            m.double_value = value
        else:
            m.int_value = int(value) & 0xFFFFFFFF
    return p.SerializeToString()


def sparkplug_node_birth(bd_seq: int, now_ms: int) -> bytes:
    """Encode an NBIRTH as Sparkplug 3.0 requires one: ``bdSeq`` and Node Control/Rebirth."""
    p = spb.Payload(timestamp=now_ms, seq=0)
    p.metrics.add(name="bdSeq", timestamp=now_ms, datatype=spb.DATA_TYPE_INT64, long_value=bd_seq)
    p.metrics.add(
        name="Node Control/Rebirth", timestamp=now_ms, datatype=spb.DATA_TYPE_BOOLEAN,
        boolean_value=False,
    )  # fmt: skip
    return p.SerializeToString()


def sparkplug_node_death(bd_seq: int) -> bytes:
    """Encode an NDEATH: the MQTT will an edge node registers when it connects.

    The broker publishes it long after it was made, so it has no timestamp, only the
    ``bdSeq`` of the session it ends (Sparkplug 3.0, 6.4.7).
    """
    p = spb.Payload()
    p.metrics.add(name="bdSeq", datatype=spb.DATA_TYPE_INT64, long_value=bd_seq)
    return p.SerializeToString()


def sparkplug_device_death(now_ms: int, seq: int) -> bytes:
    """Encode a DDEATH: a timestamp and the node's sequence number, no metrics."""
    return spb.Payload(timestamp=now_ms, seq=seq).SerializeToString()


def opcua_payload(r: Reading, now_ms: int | None = None) -> bytes:
    """Encode ``r`` as an OPC UA PubSub JSON network message (one keyframe data-set message)."""
    now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now_ms / 1000))
    stamp += f".{now_ms % 1000:03d}Z"
    doc = {
        "MessageId": f"m-{now_ms}",
        "MessageType": "ua-data",
        "PublisherId": "sim-publisher",
        "Messages": [
            {
                "DataSetWriterId": 1,
                "SequenceNumber": now_ms % 65536,
                "Timestamp": stamp,
                "MessageType": "ua-keyframe",
                "Payload": {
                    "Temperature": {"Type": 11, "Body": r.temperature_c},
                    "Humidity": {"Type": 10, "Body": r.humidity_pct},
                    "Pressure": {"Value": {"Type": 11, "Body": r.pressure_pa}},
                },
            }
        ],
    }
    return json.dumps(doc).encode()


def alarm_payload(rng: random.Random) -> bytes:
    """Return an ACME alarm."""
    code, severity, text = rng.choice(
        [
            ("E42", "critical", "spindle overheating"),
            ("W07", "warning", "filter clogging"),
            ("I01", "info", "door opened"),
        ]
    )
    return json.dumps({"code": code, "severity": severity, "text": text}).encode()


def poison_payload(content_type: str) -> bytes:
    """Return a payload that claims ``content_type`` but cannot be decoded."""
    return b"\xff\xfe not " + content_type.encode() + b" {"
