"""Sparkplug B (Eclipse Sparkplug 3.0): protobuf payloads of typed metrics.

Decoded with the specification's schema (``proto/headwater/sparkplug/v1/sparkplug_b.proto``).
A metric's value depends on context this stateless step does not have: a DDATA may name a
metric only by the alias its device's birth certificate (DBIRTH) defined, and leave out the
datatype and unit. So this normalizer returns the birth's metric *definitions* and the
*pending* readings; the keyed device state keeps the definitions and resolves the readings
into measurements (``Definitions`` of the JVM operator, jvm/enricher-state).

The MQTT topic, which carries the Sparkplug message type, is not part of a device message:
the gateway passes it as a media type parameter, ``message-type=DBIRTH`` (or NBIRTH, DDATA,
NDATA...). A birth replaces the device's definitions; any other message type (or none)
only adds the name/alias pairs it states.

A death (NDEATH, DDEATH) says the node or device went offline: the values last read from
it are stale until its next birth (Sparkplug 3.0, 6.4.7 and 6.4.11). It is an alarm event
(code ``NDEATH``/``DDEATH``, severity warning), not telemetry: the bdSeq metric of an
NDEATH numbers the session that ended, it is no reading, so it goes into the alarm's text.
The definitions are left as they are; the next birth replaces them.
"""

from __future__ import annotations

import math
import struct

from google.protobuf.message import DecodeError

from headwater.enricher.hop import budget as budgets
from headwater.enricher.hop.formats.base import MetricDef, Normalized, NormalizeError, Pending
from headwater.enricher.hop.formats.registry import register
from headwater.enricher.hop.media_type import MediaType
from headwater.proto.sparkplug.v1 import sparkplug_b_pb2 as spb

CONTENT_TYPE = "application/vnd.eclipse.sparkplug.b+protobuf"
SOURCE_FORMAT = "sparkplug.b+protobuf"
BIRTHS = frozenset({"NBIRTH", "DBIRTH"})
DEATHS = frozenset({"NDEATH", "DDEATH"})
MESSAGE_TYPES = BIRTHS | DEATHS | {"NDATA", "DDATA", "NCMD", "DCMD"}
#: The severity of a death's alarm (the enricher's 0..3: unspecified, info, warning, critical).
DEATH_SEVERITY = 2
_DEATH_TEXT = {
    "NDEATH": "edge node offline: its metrics and its devices' are stale until its next birth",
    "DDEATH": "device offline: its metrics are stale until its next birth",
}

#: Datatypes whose value is a measurement: the integers, Float, Double and Boolean (as 0/1).
NUMERIC = frozenset(range(1, 12))
#: Signed integer datatypes -> bit width: their value is two's complement in an unsigned field.
SIGNED_BITS = {1: 8, 2: 16, 3: 32, 4: 64}
#: Metric property keys that carry the engineering unit, in order of preference.
UNIT_PROPERTIES = ("engUnit", "engUnits", "unit")
_MAX_ALIAS = 2**63 - 1  # kept in a Spark long column


def signed(value: int, datatype: int) -> int:
    """Return the integer ``value`` of a signed ``datatype`` from its two's complement bits.

    Edge nodes write e.g. Int16 -2 either sign-extended to 32 bits or as 16 bits; both end
    in the same low bits, so only those are read.
    """
    bits = SIGNED_BITS.get(datatype)
    if bits is None:
        return value
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def float32(value: float) -> float:
    """Return the shortest decimal that is the same 32-bit float (17.69f, not 17.6900005)."""
    if not math.isfinite(value):
        return value
    for digits in (6, 7, 8):
        short = float(f"{value:.{digits}g}")
        if struct.unpack("<f", struct.pack("<f", short))[0] == value:
            return short
    return value


def _unit(metric: spb.Payload.Metric) -> str:
    props = metric.properties
    for key in UNIT_PROPERTIES:
        if key in props.keys:
            i = list(props.keys).index(key)
            if i < len(props.values) and props.values[i].WhichOneof("value") == "string_value":
                return props.values[i].string_value.strip()
    return ""


def _value(metric: spb.Payload.Metric) -> float | None:
    """Return a numeric metric's value, or None when it is not a measurement."""
    if metric.is_null or (metric.datatype and metric.datatype not in NUMERIC):
        return None
    which = metric.WhichOneof("value")
    if which == "int_value":
        return float(signed(metric.int_value, metric.datatype))
    if which == "long_value":
        return float(signed(metric.long_value, metric.datatype))
    if which == "float_value":
        return float32(metric.float_value)
    if which == "double_value":
        return metric.double_value
    if which == "boolean_value":
        return 1.0 if metric.boolean_value else 0.0
    return None  # strings, bytes, data sets, templates: not measurements


@register(CONTENT_TYPE)
def sparkplug_b(payload: bytes, media: MediaType) -> Normalized:
    """Sparkplug B payload -> metric definitions (births) and pending readings."""
    message_type = media.params.get("message-type", "").upper()
    if message_type and message_type not in MESSAGE_TYPES:
        raise NormalizeError(
            "PAYLOAD_INVALID", f"message-type {message_type!r} is not a Sparkplug B message type"
        )
    try:
        p = spb.Payload.FromString(payload)
    except DecodeError as exc:
        raise NormalizeError("PAYLOAD_UNDECODABLE", f"not a Sparkplug B payload: {exc}") from None
    caps = budgets.current()
    if len(p.metrics) > caps.sparkplug_max_metrics:
        raise NormalizeError(
            budgets.SPARKPLUG_REASON,
            f"{len(p.metrics)} metrics in one payload are over the cap of "
            f"{caps.sparkplug_max_metrics} ({caps.variable('sparkplug_max_metrics')})",
        )
    if message_type in DEATHS:
        return _death(message_type, p)
    max_name = caps.sparkplug_max_name_chars
    birth = message_type in BIRTHS
    payload_ms = p.timestamp if p.HasField("timestamp") else None
    definitions, pending = [], []
    for i, m in enumerate(p.metrics):
        alias = m.alias if m.HasField("alias") else None
        if alias is not None and alias > _MAX_ALIAS:
            raise NormalizeError("PAYLOAD_INVALID", f"metrics[{i}]: alias {alias} out of range")
        if len(m.name) > max_name:
            raise NormalizeError(
                budgets.SPARKPLUG_REASON,
                f"metrics[{i}]: a name of {len(m.name)} characters is over the cap of "
                f"{max_name} ({caps.variable('sparkplug_max_name_chars')})",
            )
        if not m.name and alias is None:
            raise NormalizeError("PAYLOAD_INVALID", f"metrics[{i}]: neither name nor alias")
        if birth and not m.name:
            raise NormalizeError("PAYLOAD_INVALID", f"metrics[{i}]: a birth metric needs a name")
        unit = _unit(m)
        if m.name and (birth or alias is not None):
            definitions.append(MetricDef(alias, m.name, unit, m.datatype))
        value = _value(m)
        if value is None:
            continue
        time_ms = m.timestamp if m.HasField("timestamp") else payload_ms
        pending.append(Pending(alias, m.name, value, unit, time_ms, m.datatype))
    return Normalized(
        "telemetry",
        SOURCE_FORMAT,
        definitions=definitions,
        replaces_definitions=birth,
        pending=pending,
    )


def _death(message_type: str, p: spb.Payload) -> Normalized:
    """Return the alarm of an NDEATH or DDEATH (see the module docstring)."""
    text = _DEATH_TEXT[message_type]
    bd_seq = next((m for m in p.metrics if m.name == "bdSeq"), None)
    if bd_seq is not None and (value := _value(bd_seq)) is not None:
        text += f" (bdSeq {int(value)})"
    return Normalized("alarm", SOURCE_FORMAT, alarm=(message_type, DEATH_SEVERITY, text))
