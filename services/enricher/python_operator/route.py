"""Route step: decisions -> Kafka records (topic, key, value, headers) for the sink.

Every function returns rows of the ``OUTPUT`` layout. Times come from the micro-batch
(``batch_ms``), never the wall clock, so a replayed batch writes identical records.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from headwater import record_headers as rh
from headwater.enricher.driver.settings import EnricherTopics
from headwater.enricher.executor.decode import headers_of
from headwater.enricher.executor.timestamps import timestamp
from headwater.proto.events.v1 import (
    completion_pb2,
    dead_letter_pb2,
    device_state_pb2,
    event_pb2,
    parked_message_pb2,
)
from headwater.topics import scoped_key

Row = dict[str, Any]
#: Headers carried from the ingest record to everything derived from it (trace context).
PASSTHROUGH = (rh.MESSAGE_ID, rh.TENANT, rh.RECEIVED_AT_MS, rh.TRACEPARENT, rh.TRACESTATE)


def passthrough(msg: dict[str, Any]) -> list[Row]:
    """Return the headers to copy from a message's ingest record onto derived records.

    Built once per message (its events and its completion carry the same ones).
    """
    found = msg.get("passthrough")
    if found is None:
        h = headers_of(msg)
        found = msg["passthrough"] = [{"key": k, "value": h[k]} for k in PASSTHROUGH if k in h]
    return found


def _row(topic: str, key: str, value: bytes, headers: list[Row], role: str, **kw: Any) -> Row:
    return {
        "topic": topic,
        "key": key.encode(),
        "value": value,
        "headers": headers,
        "role": role,
        "label": kw.get("label"),
        "ref": kw.get("ref"),
        "event_id": kw.get("event_id"),
        "received_ms": kw.get("received_ms"),
        "batch_ms": kw.get("batch_ms"),
    }


def source_of(msg: dict[str, Any]) -> completion_pb2.SourceRecord:
    """Return the Kafka coordinate a message was read from."""
    return completion_pb2.SourceRecord(
        topic=msg["src_topic"], partition=msg["src_partition"], offset=msg["src_offset"]
    )


#: Outcome -> the completion's label ("ENRICHED", ...); an enum's Name() is a lookup per call.
_LABELS = {
    v.number: v.name.removeprefix("OUTCOME_") for v in completion_pb2.Outcome.DESCRIPTOR.values
}


def ref_of(msg: dict[str, Any]) -> str:
    """Return the id that ties a message's events to its completion within one task."""
    return f"{msg['src_topic']}/{msg['src_partition']}/{msg['src_offset']}"


def completion(
    topics: EnricherTopics,
    msg: dict[str, Any],
    outcome: completion_pb2.Outcome,
    batch_ms: int,
    attempt: int = 1,
    reason: str = "",
) -> Row:
    """Return the completion of ``msg``; the sink adds its EventRefs after the events' acks."""
    c = completion_pb2.Completion(
        message_id=msg["message_id"] or "",
        device_id=msg["device_key"] or "",
        outcome=outcome,
        source=source_of(msg),
        reason=reason,
        attempt=attempt,
        completed_time=timestamp(batch_ms),
        tenant=msg["tenant"] or "",
    )
    return _row(
        topics.completions,
        msg["device_key"] or "",
        c.SerializeToString(),
        passthrough(msg),
        "completion",
        label=_LABELS[outcome],
        ref=ref_of(msg),
        received_ms=msg["received_ms"],
        batch_ms=batch_ms,
    )


def events(
    topics: EnricherTopics, msg: dict[str, Any], evs: Iterable[event_pb2.Event]
) -> list[Row]:
    """Return the event records of ``msg``, each on the topic of its event type."""
    hdrs = passthrough(msg)
    return [
        _row(
            topics.event_topic(e.event_type),
            e.device_id,
            e.SerializeToString(),
            hdrs,
            "event",
            label=e.event_type,
            ref=ref_of(msg),
            event_id=e.event_id,
        )
        for e in evs
    ]


def _header_pairs(headers: Any) -> list[tuple[str, bytes]]:
    return [
        (h[0], h[1] or b"") if isinstance(h, tuple) else (h["key"], h["value"] or b"")
        for h in headers or []
    ]


def _original_headers(headers: Any) -> list[dead_letter_pb2.Header]:
    # Every header in order, repeats included: redrive audit headers repeat once per redrive.
    return [dead_letter_pb2.Header(key=k, value=v) for k, v in _header_pairs(headers)]


def redrive_history(headers: Any) -> list[dead_letter_pb2.Redrive]:
    """Return the redrives recorded in a record's audit headers, oldest first."""
    pairs = _header_pairs(headers)
    by = [v.decode("utf-8", "replace") for k, v in pairs if k == rh.REDRIVE_BY]
    why = [v.decode("utf-8", "replace") for k, v in pairs if k == rh.REDRIVE_REASON]
    at = [v for k, v in pairs if k == rh.REDRIVE_AT_MS]
    return [
        dead_letter_pb2.Redrive(
            by=b, reason=r, redriven_time=timestamp(int(t) if t.isdigit() else 0)
        )
        for b, r, t in zip(by, why, at, strict=False)
    ]


def dead_letter(
    topics: EnricherTopics,
    msg: dict[str, Any],
    batch_ms: int,
    attempts: int = 1,
    stage: str | None = None,
    reason: str | None = None,
    error_class: str | None = None,
    error_message: str | None = None,
) -> Row:
    """Return the dead-letter record of ``msg`` with its original bytes and the error."""
    reason = reason or msg["error_reason"] or "UNKNOWN"
    d = dead_letter_pb2.DeadLetter(
        message_id=msg["message_id"] or "",
        device_id=msg["device_key"] or "",
        source=source_of(msg),
        original_value=msg["value"] or b"",
        original_headers=_original_headers(msg["headers"]),
        stage=stage or msg["error_stage"] or "",
        reason=reason,
        error_class=error_class or msg["error_class"] or "",
        error_message=error_message or msg["error_message"] or "",
        attempts=attempts,
        dead_lettered_time=timestamp(batch_ms),
        redrives=redrive_history(msg["headers"]),
    )
    return _row(
        topics.deadletter,
        msg["device_key"] or "",
        d.SerializeToString(),
        passthrough(msg),
        "deadletter",
        label=reason,
    )


def parked(
    topics: EnricherTopics, msg: dict[str, Any], attempt: int, not_before_ms: int, reason: str
) -> tuple[Row, bytes]:
    """Return the retry-topic record of a parked message and its bytes (kept in state)."""
    p = parked_message_pb2.ParkedMessage(
        message_id=msg["message_id"] or "",
        device_id=msg["device_key"] or "",
        source=source_of(msg),
        original_value=msg["value"] or b"",
        original_headers=_original_headers(msg["headers"]),
        attempt=attempt,
        not_before=timestamp(not_before_ms),
        reason=reason,
    )
    value = p.SerializeToString()
    row = _row(
        topics.retry,
        msg["device_key"] or "",
        value,
        passthrough(msg),
        "retry",
        label=reason,
    )
    return row, value


def device_state(topics: EnricherTopics, snapshot: device_state_pb2.DeviceState) -> Row:
    """Return the compacted entity-topic record of a device snapshot."""
    return _row(
        topics.state,
        scoped_key(snapshot.tenant, snapshot.device_id),
        snapshot.SerializeToString(),
        [],
        "state",
        label="snapshot",
    )
