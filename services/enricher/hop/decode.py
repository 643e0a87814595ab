"""Decode step: Kafka records -> device-message envelopes (or master records), errors as values.

Runs in the Python hop (``arrow_hop``) on rows whose key the JVM computed
(:func:`headwater.enricher.source.keys.key_columns`). A record that cannot be decoded never
raises: it gets ``error_*`` fields and is routed to the dead-letter topic, because a raise
inside the query would crash-loop on replay.
"""

from __future__ import annotations

from typing import Any

from headwater import record_headers as rh
from headwater.enricher.hop.arrowsafe import sanitize
from headwater.enricher.hop.budget import CPU_REASON
from headwater.enricher.hop.schema import DECODED_FIELDS, field_names
from headwater.proto.device.v1 import device_message_pb2
from headwater.proto.master.v1 import device_master_pb2
from headwater.topics import split_scoped_key

_FIELDS = field_names(DECODED_FIELDS)


def header_map(headers: list[Any] | None) -> dict[str, bytes]:
    """Return ``{name: value}`` of Kafka headers (last one wins), from rows or tuples."""
    out: dict[str, bytes] = {}
    for h in headers or []:
        key, value = (h["key"], h["value"]) if not isinstance(h, tuple) else h
        out[key] = value or b""
    return out


def _text(value: bytes | None) -> str:
    return value.decode("utf-8", "replace") if value else ""


def _error(out: dict[str, Any], stage: str, reason: str, exc: BaseException | str) -> None:
    out["error_stage"], out["error_reason"] = stage, reason
    if isinstance(exc, BaseException):
        # Sanitized: an exception may quote input text that is not valid UTF-8.
        out["error_class"], out["error_message"] = type(exc).__name__, sanitize(str(exc)[:1000])
    else:
        out["error_class"], out["error_message"] = "ValidationError", exc


def decode_record(
    topic: str, key: bytes | None, value: bytes | None, headers: Any, master_topic: str
) -> dict[str, Any]:
    """Decode one record into the ``DECODED_FIELDS`` columns; never raises."""
    out: dict[str, Any] = dict.fromkeys(_FIELDS)
    out["device_key"] = _text(key)
    if topic == master_topic:
        out["kind"] = "master"
        out["master_deleted"] = not value
        # The key names the scope: "<tenant>/<device_id>", or a legacy "<device_id>".
        out["tenant"], out["device_key"] = split_scoped_key(out["device_key"])
        if value:
            try:
                m = device_master_pb2.DeviceMaster.FromString(value)
                out |= {"site": m.site, "area_code": m.area_code, "model": m.model}
                out["vendor_format"] = m.vendor_format
            except Exception as exc:  # any parse failure is data, not a crash
                _error(out, "decode", "MASTER_UNDECODABLE", exc)
        return out
    _ingest_headers(out, headers)
    device_id = _envelope(out, value)
    if device_id is not None:
        out["device_key"] = device_id
    return out


def _ingest_headers(out: dict[str, Any], headers: Any) -> None:
    """Fill the columns an ingest record's headers give (all a row has before its envelope)."""
    out["kind"] = "ingest"
    hdr = out["header_map"] = header_map(headers)
    out["tenant"] = _text(hdr.get(rh.TENANT))
    out["gateway_id"] = _text(hdr.get(rh.GATEWAY_ID))
    out["endpoint"] = _text(hdr.get(rh.ENDPOINT))
    out["message_id"] = _text(hdr.get(rh.MESSAGE_ID))
    try:
        out["received_ms"] = int(hdr.get(rh.RECEIVED_AT_MS) or 0)
    except ValueError:
        out["received_ms"] = 0


def over_budget(
    topic: str, device_key: str, headers: Any, master_topic: str, message: str
) -> dict[str, Any]:
    """Return the decoded row of a record whose decoding went over its CPU budget.

    Nothing of its value is kept (the decode did not finish); the headers, read before,
    name the message for its dead letter (stage ``decode``, reason ``NORMALIZE_BUDGET``).
    """
    out: dict[str, Any] = dict.fromkeys(_FIELDS)
    if topic == master_topic:
        out["kind"], out["master_deleted"] = "master", False
    else:
        _ingest_headers(out, headers)
    out["device_key"] = device_key
    out["error_stage"], out["error_reason"] = "decode", CPU_REASON
    out["error_class"], out["error_message"] = "CpuBudgetExceeded", message
    return out


#: The largest value of the ``long`` columns (``sequence``).
MAX_LONG = 2**63 - 1


def envelope_problem(
    message_id: str, device_id: str, content_type: str, sequence: int, seconds: int, nanos: int
) -> str:
    """Return why an envelope of these fields cannot become a decoded row ("" when it can).

    Ingest refuses all of these; the enricher checks again because the topic may hold
    records written before those checks, or by another producer, and one such record
    must not stop the query.
    """
    if not message_id or not device_id or not content_type:
        return "message_id, device_id and content_type are required"
    if sequence > MAX_LONG:
        return f"sequence {sequence} does not fit a signed 64-bit integer"
    if not 0 <= nanos <= 999_999_999 or not -62135596800 <= seconds <= 253402300799:
        return f"device_time is not a valid Timestamp (seconds={seconds}, nanos={nanos})"
    return ""


def _envelope(out: dict[str, Any], value: bytes | None) -> str | None:
    """Parse and check an ingest record's envelope into ``out``'s columns; its device id.

    None (and ``out`` marked) when it is bad. Each field is read once, for the check and the
    columns: upb makes a new Python object at every read of a field.
    """
    try:
        msg = device_message_pb2.DeviceMessage.FromString(value or b"")
    except Exception as exc:
        _error(out, "decode", "ENVELOPE_UNDECODABLE", exc)
        return None
    message_id, device_id, content_type = msg.message_id, msg.device_id, msg.content_type
    sequence, ts = msg.sequence, msg.device_time
    seconds, nanos = ts.seconds, ts.nanos
    problem = envelope_problem(message_id, device_id, content_type, sequence, seconds, nanos)
    if problem:
        _error(out, "decode", "ENVELOPE_INVALID", problem)
        return None
    out["message_id"] = message_id
    out["device_id"] = device_id
    out["content_type"] = content_type
    # seconds * 1000 + nanos // 1_000_000 is timestamps.ms_of (of the fields read here)
    out["device_time_ms"] = seconds * 1000 + nanos // 1_000_000
    out["sequence"] = int(sequence)
    out["payload"] = msg.payload
    return device_id


def decode_for_key(
    topic: str, device_key: str, value: bytes | None, headers: Any, master_topic: str
) -> dict[str, Any]:
    """Decode one record for the device key it was grouped by; never raises.

    The key the row was grouped by wins over what the record says: an ingest envelope
    whose ``device_id`` is not its record key is refused (``ENVELOPE_INVALID``), because its
    order and state follow the key. The key's tenant and the source columns stay in the JVM
    (``arrow_hop``).
    """
    msg = decode_record(topic, None, value, headers, master_topic)
    msg["device_key"] = device_key
    if normalizable(msg) and msg["device_id"] != device_key:
        _key_mismatch(msg, device_key)
    return msg


def _key_mismatch(out: dict[str, Any], device_key: str) -> None:
    """Refuse a row whose envelope names another device than the record key it came under."""
    _error(
        out,
        "decode",
        "ENVELOPE_INVALID",
        f"record key {device_key!r} is not the envelope's device_id "
        f"{out['device_id']!r} (ingest topics are keyed by device id)",
    )


#: A decoded ingest row before its headers and envelope (``decode_ingest`` copies it).
_INGEST_ROW: dict[str, Any] = dict.fromkeys(_FIELDS) | {
    "kind": "ingest",
    "tenant": "",
    "endpoint": "",
}


def decode_ingest(
    device_key: str,
    value: bytes | None,
    gateway_id: bytes | None,
    message_id: bytes | None,
    received_at: bytes | None,
) -> dict[str, Any]:
    """Return :func:`decode_for_key` of an ingest record given the headers the hop reads.

    The hop's hot path (``arrow_hop``): the same columns as ``decode_for_key`` with the
    headers ``(GATEWAY_ID, g), (MESSAGE_ID, m), (RECEIVED_AT_MS, r)`` (those not None; tenant
    and endpoint absent), without building the header list and map per record.
    ``header_map`` is left out: no step after decoding reads it.
    ``tests/enricher/test_hop_fast_paths.py`` checks that the two agree.
    """
    out = _INGEST_ROW.copy()
    out["gateway_id"] = gateway_id.decode("utf-8", "replace") if gateway_id else ""
    out["message_id"] = message_id.decode("utf-8", "replace") if message_id else ""
    try:
        out["received_ms"] = int(received_at or 0)
    except ValueError:
        out["received_ms"] = 0
    out["device_key"] = device_key
    device_id = _envelope(out, value)
    if device_id is not None and device_id != device_key:
        _key_mismatch(out, device_key)
    return out


def normalizable(msg: dict[str, Any]) -> bool:
    """True for a decoded device message (not master data, not a decode error)."""
    return msg["kind"] == "ingest" and not msg["error_reason"]
