"""OPC UA PubSub JSON (OPC 10000-14, section 7.2.5, "JSON message mapping").

A network message (``{"MessageId", "MessageType": "ua-data", "PublisherId", "Messages":
[...]}``) carries one or more data-set messages (``{"DataSetWriterId", "SequenceNumber",
"Timestamp", "Status", "MessageType": "ua-keyframe", "Payload": {field: value}}``). Without
the network message header the message is the array of data-set messages, or one of them.

A field value is encoded as the publisher's field content mask says: a raw JSON value, a
Variant (1.04 ``{"Type": 11, "Body": 21.5}``, 1.05 ``{"UaType": 11, "Value": 21.5}``), or a
DataValue (1.04 ``{"Value": <Variant>, "Status": ..., "SourceTimestamp": ...}``, 1.05 the
Variant's members plus ``"StatusCode": {"Code": ..., "Symbol": ...}``). Numeric and boolean
values are measurements; a value whose status code is Bad is not (nor is every field of a
data-set message whose own status is Bad). The data messages carry no engineering units
(those are in the data-set metadata), so the unit is empty, unless a DataValue carries its
item's ``"EngineeringUnits"`` (an EUInformation in the JSON encoding, as Headwater's OPC UA
connector adds it): then its ``DisplayName`` is the unit, converted like any other.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from headwater.enricher.hop.formats.base import (
    Measurement,
    Normalized,
    NormalizeError,
    load_json,
    measure,
)
from headwater.enricher.hop.formats.registry import register
from headwater.enricher.hop.media_type import MediaType

CONTENT_TYPE = "application/vnd.opcfoundation.uapubsub+json"
SOURCE_FORMAT = "opcua.pubsub+json"

#: Built-in type ids (OPC 10000-6, 5.1.2) whose values are measurements.
BOOLEAN = 1
INTEGERS = frozenset({2, 3, 4, 5, 6, 7, 8, 9})  # SByte .. UInt64 (64-bit ones are strings)
FLOATS = frozenset({10, 11})  # Float, Double ("NaN", "Infinity", "-Infinity" as strings)
_SPECIAL = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}
_SKIPPED_MESSAGE_TYPES = frozenset({"ua-keepalive", "ua-metadata"})


def is_bad(status: Any) -> bool:
    """Return True for a Bad StatusCode (severity bits 10); Good and Uncertain are kept.

    A StatusCode is a number (reversible encoding, 1.04) or ``{"Code": n, "Symbol": s}``.
    """
    code = status.get("Code", 0) if isinstance(status, dict) else status
    if isinstance(code, bool) or not isinstance(code, int):
        raise NormalizeError("PAYLOAD_INVALID", f"status code {status!r} is not a number")
    return (code >> 30) & 0b11 == 0b10


def _time_ms(text: Any, where: str) -> int | None:
    if text is None:
        return None
    if not isinstance(text, str):
        raise NormalizeError("PAYLOAD_INVALID", f"{where}: timestamp {text!r} is not a string")
    try:
        # OPC UA writes up to 7 fraction digits (100 ns ticks); Python reads at most 6.
        head, dot, frac = text.partition(".")
        if dot:
            digits = len(frac) - len(frac.lstrip("0123456789"))
            frac = frac[: min(digits, 6)] + frac[digits:]
        parsed = datetime.fromisoformat(head + dot + frac if dot else head)
        if parsed.tzinfo is None:
            raise ValueError("no time zone")
        return int(parsed.timestamp() * 1000)
    except (ValueError, OverflowError) as exc:
        raise NormalizeError("PAYLOAD_INVALID", f"{where}: bad timestamp {text!r}: {exc}") from None


def _scalar(type_id: Any, body: Any, where: str) -> float | None:
    """Return the number a Variant of ``type_id`` holds, or None when not a measurement."""
    if isinstance(body, list):
        return None  # arrays and matrices are not one reading
    if isinstance(type_id, bool) or not isinstance(type_id, int):
        raise NormalizeError("PAYLOAD_INVALID", f"{where}: type {type_id!r} is not a type id")
    if type_id == BOOLEAN:
        return 1.0 if body is True else 0.0 if body is False else _bad(where, body)
    if type_id in INTEGERS:
        if isinstance(body, str):  # Int64/UInt64 are JSON strings
            try:
                body = int(body)
            except ValueError:
                return _bad(where, body)
        number = _float(body, where) if _is_number(body) else _bad(where, body)
        return number if number.is_integer() else _bad(where, body)
    if type_id in FLOATS:
        if isinstance(body, str) and body in _SPECIAL:
            return _SPECIAL[body]  # rejected by the finiteness check, which names the field
        return _float(body, where) if _is_number(body) else _bad(where, body)
    return None  # strings, dates, node ids...: not measurements


def _bad(where: str, body: Any) -> float:
    raise NormalizeError("PAYLOAD_INVALID", f"{where}: {body!r} does not match its type")


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _float(v: float, where: str) -> float:
    try:
        return float(v)
    except OverflowError:  # an integer beyond a double
        raise NormalizeError("PAYLOAD_INVALID", f"{where}: {v} is out of range") from None


def _raw(body: Any, where: str) -> float | None:
    if isinstance(body, bool):
        return 1.0 if body else 0.0
    return _float(body, where) if _is_number(body) else None


def field_value(value: Any, where: str) -> tuple[float | None, int | None]:
    """Return ``(number or None, source time ms or None)`` of one encoded field value."""
    if not isinstance(value, dict):
        return _raw(value, where), None
    status = value.get("StatusCode", value.get("Status", 0))
    if is_bad(status):
        return None, None
    source = _time_ms(value.get("SourceTimestamp"), where)
    if "UaType" in value:  # 1.05 Variant or DataValue
        return _scalar(value["UaType"], value.get("Value"), where), source
    if "Type" in value and "Body" in value:  # 1.04 Variant
        return _scalar(value["Type"], value["Body"], where), source
    if "Value" in value:  # 1.04 DataValue: its Value is a Variant or a raw value
        inner, _ = field_value(value["Value"], where)
        return inner, source
    return None, source  # a DataValue with a status or timestamps only


def field_unit(value: Any, where: str) -> str:
    """Return the unit of a field value's ``EngineeringUnits`` (its DisplayName), or "".

    A LocalizedText is ``{"Locale", "Text"}``, or its text alone (1.04 non-reversible).
    """
    eu = value.get("EngineeringUnits") if isinstance(value, dict) else None
    if eu is None:
        return ""
    name = eu.get("DisplayName", "") if isinstance(eu, dict) else None
    text = name.get("Text", "") if isinstance(name, dict) else name
    if not isinstance(text, str):
        raise NormalizeError(
            "PAYLOAD_INVALID", f"{where}.EngineeringUnits: {eu!r} is no EUInformation"
        )
    return text.strip()


def _data_set_messages(doc: Any) -> list[Any]:
    if isinstance(doc, list):
        return doc
    if not isinstance(doc, dict):
        raise NormalizeError("PAYLOAD_INVALID", "expected a network or data-set message object")
    if "Messages" in doc:
        kind = doc.get("MessageType", "ua-data")
        if not isinstance(kind, str):
            raise NormalizeError("PAYLOAD_INVALID", f"MessageType {kind!r} is not ua-data")
        if kind == "ua-metadata":
            return []
        if kind != "ua-data":
            raise NormalizeError("PAYLOAD_INVALID", f"MessageType {kind!r} is not ua-data")
        msgs = doc["Messages"]
        return msgs if isinstance(msgs, list) else [msgs]
    if "Payload" in doc:
        return [doc]
    raise NormalizeError("PAYLOAD_INVALID", "expected Messages (network message) or Payload")


@register(CONTENT_TYPE)
def opcua_pubsub_json(payload: bytes, media: MediaType) -> Normalized:
    """OPC UA PubSub JSON network message -> the good numeric fields of its data-set messages."""
    values = []
    for i, dsm in enumerate(_data_set_messages(load_json(payload, media))):
        where = f"Messages[{i}]"
        if not isinstance(dsm, dict):
            raise NormalizeError("PAYLOAD_INVALID", f"{where}: not an object")
        kind = dsm.get("MessageType", "ua-keyframe")
        if not isinstance(kind, str):
            raise NormalizeError("PAYLOAD_INVALID", f"{where}.MessageType: {kind!r}")
        if kind in _SKIPPED_MESSAGE_TYPES or is_bad(dsm.get("Status", 0)):
            continue
        fields = dsm.get("Payload", {})
        if not isinstance(fields, dict):
            raise NormalizeError("PAYLOAD_INVALID", f"{where}.Payload: not an object")
        message_ms = _time_ms(dsm.get("Timestamp"), f"{where}.Timestamp")
        for name, encoded in fields.items():
            number, source_ms = field_value(encoded, f"{where}.Payload.{name}")
            if number is None:
                continue
            unit = field_unit(encoded, f"{where}.Payload.{name}")
            if unit:  # to the canonical unit, as every format's measurements are
                converted = measure(name, number, unit)
                number, unit = converted.value, converted.unit
            values.append(Measurement(name, number, unit, source_ms or message_ms))
    return Normalized("telemetry", SOURCE_FORMAT, values)
