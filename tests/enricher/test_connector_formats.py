"""What each gateway connector spools, through the enricher's hop and keyed state, ends ENRICHED.

The payloads and media types are made by the connectors' own code (the MQTT connector passes
payloads through untouched, so for MQTT they are what the edge publishes: our Sparkplug B
edge-node simulator and a JSON publisher): the bytes the connector tests find on the ingest
topic. They run as a batch frame of raw ingest records on the suite's Spark session (no
Kafka, no streaming query), as test_enrich.py does. Sparkplug's lifecycle too: a node birth,
a device death and a node death.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from headwater.enricher.state import jvm_state
from headwater.enricher.state.policy import Policy
from headwater.enricher.topics import EnricherTopics
from headwater.gateway.connectors import opcua_json
from headwater.gateway.connectors.modbus import DDATA, ddata
from headwater.gateway.connectors.modbus_config import Register
from headwater.gateway.connectors.mqtt_config import SparkplugConfig
from headwater.gateway.connectors.sparkplug import parse_topic
from headwater.proto.events.v1 import completion_pb2, device_state_pb2, event_pb2
from headwater.proto.master.v1 import device_master_pb2
from headwater_dev.devstack import vendors
from tests.support.kafkatools import ACME, Msg, envelope, ingest_headers, outcome

pytestmark = pytest.mark.spark

RAW = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
    "timestampType int, headers array<struct<key:string,value:binary>>"
)
T = EnricherTopics.with_prefix("cf.")
T0 = 1_700_000_000_000
TENANT = "acme-tenant"
UNECE = "http://www.opcfoundation.org/UA/units/un/cefact"  # OPC UA's namespace of UNECE codes
SPARKPLUG = SparkplugConfig(
    groups=("acme",), endpoint="telemetry", node_device_id="{group}:{node}",
    device_id="{group}:{node}:{device}",
)  # fmt: skip


def _sparkplug(message_id: str, topic: str, payload: bytes, sequence: int) -> Msg:
    """A Sparkplug B message as the MQTT connector spools it (device id and media type)."""
    parsed = parse_topic(topic, SPARKPLUG)
    assert parsed is not None
    return Msg(message_id, parsed.device_id, parsed.content_type, payload, sequence, T0)


def _register(name: str, table: str, data_type: str, unit: str) -> Register:
    return Register(name, table, 0, data_type, "big", "big", 1.0, 0.0, unit, False)


def _messages() -> list[Msg]:
    reading = vendors.Reading(21.5, 40.0, 101_325.0, 3.3)
    edge_node = vendors.sparkplug_payload  # the simulator the MQTT connector tests publish with
    node = "spBv1.0/acme/{}/edge1"
    device = node + "/press"
    source = datetime.fromtimestamp(T0 / 1000, UTC)
    registers = {r.name: r for r in (_register("pressure", "input", "float32", "hPa"),
                                      _register("running", "coil", "bool", ""))}  # fmt: skip
    return [
        # MQTT, Sparkplug B: the birth defines names and units, the data names aliases only.
        _sparkplug("spb-node-birth", node.format("NBIRTH"), vendors.sparkplug_node_birth(7, T0), 1),
        _sparkplug("spb-birth", device.format("DBIRTH"), edge_node(reading, True, T0), 2),
        _sparkplug("spb-data", device.format("DDATA"), edge_node(reading, False, T0 + 1000), 3),
        # The deaths: the device's, then the node's (the broker publishes its MQTT will).
        _sparkplug("spb-death", device.format("DDEATH"),
                   vendors.sparkplug_device_death(T0 + 2000, 4), 4),
        _sparkplug("spb-node-death", node.format("NDEATH"), vendors.sparkplug_node_death(7), 5),
        # MQTT, plain JSON with the media type its topic is configured with.
        Msg("json", "acme-plant-m1", ACME, b'{"temp_c": 7, "pad": "xxxx"}', 1, T0),
        # OPC UA: one data change of an item in °F, and the gap marked after a reconnect.
        Msg("opc-change", "press-opc", opcua_json.CONTENT_TYPE, opcua_json.data_change(
            "press-1", 1, 1, "Temperature", 11, 70.7, 0, source, source + timedelta(seconds=1),
            opcua_json.eu_information(UNECE, 4604232, "°F", "degree Fahrenheit"),
        ), 1, T0),
        Msg("opc-gap", "press-opc", opcua_json.CONTENT_TYPE, opcua_json.gap(
            "press-1", 2, ["Temperature"], source, source + timedelta(seconds=30)
        ), 2, T0),
        # Modbus: a poll's values as a Sparkplug DDATA with names and units (no birth).
        Msg("modbus", "press-modbus", DDATA,
            ddata(registers, {"pressure": 1013.25, "running": 1.0}, T0), 1, T0),
    ]  # fmt: skip


def _rows(msgs: list[Msg]) -> list[tuple]:
    masters = [
        (f"{TENANT}/{d}".encode(),
         device_master_pb2.DeviceMaster(device_id=d, site="s", tenant=TENANT).SerializeToString(),
         T.master, 0, i, None, 0, [])
        for i, d in enumerate(sorted({m.device_id for m in msgs}))
    ]  # fmt: skip
    ingested = [
        (m.device_id.encode(), envelope(m), T.ingest[0], 0, i, None, 0, ingest_headers(m, T0))
        for i, m in enumerate(msgs)
    ]
    return masters + ingested


def test_every_connectors_payloads_end_enriched_with_their_values_and_units(spark) -> None:
    msgs = _messages()
    raw = spark.createDataFrame(_rows(msgs), RAW)
    out = jvm_state.process_devices(raw, Policy(T, 3, 1000, 10_000, 60_000))
    rows = out.select("role", "value").collect()  # one Spark job for every role

    def records(role: str, message: Any) -> list[Any]:
        return [message.FromString(r.value) for r in rows if r.role == role]

    completions = {
        c.message_id: (outcome(c), c.reason)
        for c in records("completion", completion_pb2.Completion)
    }
    events = records("event", event_pb2.Event)
    states = {s.device_id: s for s in records("state", device_state_pb2.DeviceState)}
    assert completions == dict.fromkeys([m.message_id for m in msgs], ("OUTCOME_ENRICHED", ""))

    def measured(message_id: str) -> list[tuple[str, float, str, int]]:
        (event,) = [e for e in events if e.message_id == message_id]
        return [(m.name, m.value, m.unit, m.time.ToMilliseconds()) for m in event.measurements]

    assert measured("spb-birth") == [
        ("Process/Temperature", 21.5, "celsius", T0),
        ("Process/Pressure", 101_325.0, "pascal", T0),
        ("Supply/Voltage", 3.3, "volt", T0),
    ]
    # The data names aliases only: names and units come from the birth.
    assert measured("spb-data") == [
        ("Process/Temperature", 21.5, "celsius", T0 + 1000),
        ("Process/Pressure", 101_325.0, "pascal", T0 + 1000),
        ("Supply/Voltage", 3.3, "volt", T0 + 1000),
    ]
    assert measured("json") == [("temperature", 7.0, "celsius", 0)]
    # The unit of an OPC UA item: its EngineeringUnits, which the connector passes on.
    assert measured("opc-change") == [("Temperature", 21.5, "celsius", T0)]
    assert measured("modbus") == [("pressure", 101_325.0, "pascal", T0), ("running", 1.0, "", T0)]
    # The gap's values are Bad (no communication): its event carries no measurement.
    assert measured("opc-gap") == []
    # The node's birth: its bdSeq and Node Control metrics, as numbers, without units.
    assert measured("spb-node-birth") == [
        ("bdSeq", 7.0, "", T0), ("Node Control/Rebirth", 0.0, "", T0)
    ]  # fmt: skip

    # A death is one alarm event (warning) of the node or device, and nothing else: the NDEATH's
    # bdSeq, which numbers the session that ended, is no reading.
    def alarm(message_id: str) -> tuple[str, str, str, int, str, int]:
        (event,) = [e for e in events if e.message_id == message_id]
        return (event.device_id, event.event_type, event.alarm.code, event.alarm.severity,
                event.alarm.text, len(event.measurements))  # fmt: skip

    assert alarm("spb-death") == (
        "acme:edge1:press", "alarm", "DDEATH", event_pb2.SEVERITY_WARNING,
        "device offline: its metrics are stale until its next birth", 0,
    )  # fmt: skip
    assert alarm("spb-node-death") == (
        "acme:edge1", "alarm", "NDEATH", event_pb2.SEVERITY_WARNING,
        "edge node offline: its metrics and its devices' are stale until its next birth (bdSeq 7)",
        0,
    )  # fmt: skip
    # The snapshots: a death is each device's last message; the values read before it stay.
    press, edge = states["acme:edge1:press"], states["acme:edge1"]
    assert (press.last_message_id, press.message_count) == ("spb-death", 3)
    assert [(v.name, v.value) for v in press.latest_values] == [
        ("Process/Pressure", 101_325.0), ("Process/Temperature", 21.5), ("Supply/Voltage", 3.3)
    ]  # fmt: skip
    assert (edge.last_message_id, edge.message_count) == ("spb-node-death", 2)
    assert [(v.name, v.value) for v in edge.latest_values] == [
        ("Node Control/Rebirth", 0.0), ("bdSeq", 7.0)
    ]  # fmt: skip
