"""Vendor payloads for tests: Sparkplug B encoded by hand, OPC UA PubSub JSON messages.

The Sparkplug B payloads are encoded from the specification's field numbers (Eclipse
Sparkplug 3.0, 6.4 "Payload"), not with our .proto, so a wrong field number or type in
proto/headwater/sparkplug/v1/sparkplug_b.proto fails the tests that use them. The OPC UA
messages follow the layouts of OPC 10000-14, 7.2.5.
"""

from __future__ import annotations

import json
import struct

from headwater.wire import length_field, varint, varint_field

SPB = "application/vnd.eclipse.sparkplug.b+protobuf"
DBIRTH = SPB + "; message-type=DBIRTH"
DDATA = SPB + "; message-type=DDATA"
OPCUA = "application/vnd.opcfoundation.uapubsub+json"


# --- Sparkplug B ----------------------------------------------------------------------------
# Field numbers from the specification: Payload{timestamp=1 uint64, metrics=2, seq=3};
# Metric{name=1, alias=2, timestamp=3, datatype=4, is_null=7, properties=9, int_value=10,
# long_value=11, float_value=12, double_value=13, boolean_value=14, string_value=15};
# PropertySet{keys=1, values=2}; PropertyValue{type=1, string_value=8}.


def sparkplug_metric(
    name: str = "",
    alias: int | None = None,
    datatype: int = 0,
    ts: int | None = None,
    unit: str = "",
    is_null: bool = False,
    **value: object,
) -> bytes:
    """One Sparkplug B Metric; ``value`` is one ``<kind>_value=...`` (int, long, float, ...)."""
    out = length_field(1, name.encode()) if name else b""
    if alias is not None:
        out += varint_field(2, alias)
    if ts is not None:
        out += varint_field(3, ts)
    if datatype:
        out += varint_field(4, datatype)
    if is_null:
        out += varint_field(7, 1)
    if unit:
        prop = varint_field(1, 12) + length_field(8, unit.encode())
        out += length_field(9, length_field(1, b"engUnit") + length_field(2, prop))
    for kind, v in value.items():
        if kind == "int_value":
            out += varint_field(10, int(v) & 0xFFFFFFFF)  # type: ignore[call-overload]
        elif kind == "long_value":
            out += varint_field(11, int(v) & 0xFFFFFFFFFFFFFFFF)  # type: ignore[call-overload]
        elif kind == "float_value":
            out += varint(12 << 3 | 5) + struct.pack("<f", v)
        elif kind == "double_value":
            out += varint(13 << 3 | 1) + struct.pack("<d", v)
        elif kind == "boolean_value":
            out += varint_field(14, int(bool(v)))
        elif kind == "string_value":
            out += length_field(15, str(v).encode())
    return out


def sparkplug_payload(*metrics: bytes, ts: int = 1_700_000_000_000, seq: int = 0) -> bytes:
    """A Sparkplug B Payload of ``metrics`` (encoded by :func:`sparkplug_metric`)."""
    return (
        varint_field(1, ts) + b"".join(length_field(2, m) for m in metrics) + varint_field(3, seq)
    )


#: A DBIRTH defining eight metrics (aliases 1-8), with units, types, a null and an Int64.
BIRTH = sparkplug_payload(
    sparkplug_metric("Temp", alias=1, datatype=9, unit="°F", float_value=70.7),
    sparkplug_metric("Pressure", alias=2, datatype=10, unit="hPa", double_value=1013.25),
    sparkplug_metric("Offset", alias=3, datatype=2, int_value=-2),  # Int16, sign-extended
    sparkplug_metric("Running", alias=4, datatype=11, boolean_value=True),
    sparkplug_metric("Serial", alias=5, datatype=12, string_value="SN-1"),  # not a measurement
    sparkplug_metric("Counter", alias=6, datatype=4, long_value=-5),  # Int64, two's complement
    sparkplug_metric("Spare", alias=7, datatype=10, is_null=True),  # null: defined, no value
    sparkplug_metric("Started", alias=8, datatype=13, long_value=1_600_000_000_000),  # DateTime
)


# --- OPC UA PubSub JSON ----------------------------------------------------------------------


def opcua_network(*messages: dict[str, object]) -> bytes:
    """An OPC UA PubSub JSON NetworkMessage carrying ``messages`` (DataSetMessages)."""
    return json.dumps(
        {
            "MessageId": "32235546-05d9-4fd7-97df-ea3ff3408574",
            "MessageType": "ua-data",
            "PublisherId": "MyPublisher",
            "Messages": list(messages),
        }
    ).encode()
