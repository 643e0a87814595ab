"""Decode step: Kafka records -> device-message envelopes (or master records), errors as values.

Runs in the Python hop (``arrow_hop``) on rows whose key the JVM computed
(:func:`key_columns`). A record that cannot be decoded never raises: it gets ``error_*``
fields and is routed to the dead-letter topic, because a raise inside the query would
crash-loop on replay.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from headwater import record_headers as rh
from headwater.enricher.executor.arrowsafe import sanitize
from headwater.enricher.executor.schema import DECODED_FIELDS, field_names
from headwater.enricher.executor.timestamps import ms_of
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
    try:
        msg = device_message_pb2.DeviceMessage.FromString(value or b"")
    except Exception as exc:
        _error(out, "decode", "ENVELOPE_UNDECODABLE", exc)
        return out
    problem = envelope_problem(msg)
    if problem:
        _error(out, "decode", "ENVELOPE_INVALID", problem)
        return out
    out |= {
        "message_id": msg.message_id,
        "device_id": msg.device_id,
        "device_key": msg.device_id,
        "content_type": msg.content_type,
        "device_time_ms": ms_of(msg.device_time),
        "sequence": int(msg.sequence),
        "payload": msg.payload,
    }
    return out


#: The largest value of the ``long`` columns (``sequence``).
MAX_LONG = 2**63 - 1


def envelope_problem(msg: device_message_pb2.DeviceMessage) -> str:
    """Return why ``msg`` cannot become a decoded row ("" when it can).

    Ingest refuses all of these; the enricher checks again because the topic may hold
    records written before those checks, or by another producer, and one such record
    must not stop the query.
    """
    if not msg.message_id or not msg.device_id or not msg.content_type:
        return "message_id, device_id and content_type are required"
    if msg.sequence > MAX_LONG:
        return f"sequence {msg.sequence} does not fit a signed 64-bit integer"
    ts = msg.device_time
    if not 0 <= ts.nanos <= 999_999_999 or not -62135596800 <= ts.seconds <= 253402300799:
        return f"device_time is not a valid Timestamp (seconds={ts.seconds}, nanos={ts.nanos})"
    return ""


def last_header(name: str) -> Column:
    """The value of the last ``name`` header of a row's ``headers`` (null when absent).

    Found by position in the reversed keys rather than with ``filter(headers, h -> ...)``:
    a lambda is interpreted row by row (looking up Spark's SQL config for every row: 7-8%
    of a drain's samples, docs/benchmarks.md), and it keeps the whole projection out of
    Spark's generated code.
    """
    last = F.reverse("headers")
    return F.get(last.getField("value"), F.array_position(last.getField("key"), name) - 1)


def key_columns(raw: DataFrame, master_topic: str) -> DataFrame:
    """Return raw Kafka rows with the keyed state's key, computed in the JVM.

    The key is ``(tenant, device_key)``: for ingest records the ``headwater-tenant`` header
    and the record key (ingest keys every record by its device id), for master records the
    two parts of ``"<tenant>/<device_id>"`` (as :func:`headwater.topics.split_scoped_key`).
    Computing it here, not in a Python step, lets records reach the keyed state with one
    Python hop (decode and normalize, ``arrow_hop``): each hop is an Arrow round trip of
    every row (docs/enricher.md, "where a batch's time goes").
    Bytes that are not UTF-8 become U+FFFD, as Python's ``decode("utf-8", "replace")``.

    Returns:
        The ``schema.KEYED`` columns.
    """
    key = F.expr("make_valid_utf8(coalesce(cast(key as string), ''))")
    device = F.substring_index(key, "/", -1)
    master_tenant = F.when(
        F.instr(key, "/") > 0, F.expr("substring(k, 1, length(k) - length(d) - 1)")
    ).otherwise(F.lit(""))
    last_tenant = last_header(rh.TENANT)
    tenant_header = F.make_valid_utf8(F.coalesce(last_tenant.cast("string"), F.lit("")))
    is_master = F.col("topic") == F.lit(master_topic)
    return (
        raw.withColumn("k", key)
        .withColumn("d", device)
        .select(
            F.when(is_master, master_tenant).otherwise(tenant_header).alias("tenant"),
            F.when(is_master, F.col("d")).otherwise(F.col("k")).alias("device_key"),
            F.col("topic").alias("src_topic"),
            F.col("partition").alias("src_partition"),
            F.col("offset").alias("src_offset"),
            "value",
            "headers",
        )
    )


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
        _error(
            msg,
            "decode",
            "ENVELOPE_INVALID",
            f"record key {device_key!r} is not the envelope's device_id "
            f"{msg['device_id']!r} (ingest topics are keyed by device id)",
        )
    return msg


def normalizable(msg: dict[str, Any]) -> bool:
    """True for a decoded device message (not master data, not a decode error)."""
    return msg["kind"] == "ingest" and not msg["error_reason"]
