"""Build Arrow batches from step rows so that one unencodable row cannot fail a task.

A row a step produced may hold a value Arrow refuses: a string with a lone surrogate
(from a JSON escape of U+D800, for example) cannot be UTF-8. Converting the whole batch
would raise inside the query and crash-loop it on replay, stopping every device. So the
batch is converted at once (the fast path), and only when that fails row by row: a row
that does not convert is replaced by its text-sanitized copy marked as an ``encode``
error, which the keyed state dead-letters like any other bad record.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

#: The stage and reason of a row whose values cannot be encoded.
STAGE = "encode"
REASON = "UNENCODABLE_VALUE"


def sanitize(value: Any) -> Any:
    """Return ``value`` with every string made valid UTF-8 (bad characters become "?")."""
    if isinstance(value, str):
        return value.encode("utf-8", "replace").decode("utf-8")
    if isinstance(value, dict):
        return {k: sanitize(v) for k, v in value.items()}
    if isinstance(value, list):
        return [sanitize(v) for v in value]
    return value


def encodable(value: Any) -> bool:
    """Return True when every string in ``value`` encodes as UTF-8."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return False
        return True
    if isinstance(value, dict):
        return all(encodable(v) for v in value.values())
    if isinstance(value, list | tuple):
        return all(encodable(v) for v in value)
    return True


def record_batch(rows: list[dict[str, Any]], schema: pa.Schema) -> pa.RecordBatch:
    """Return ``rows`` as a batch of ``schema``; rows that fail become ``encode`` errors.

    ``schema`` must have the ``error_*`` columns. A failed row keeps its sanitized values
    so its dead letter still names the message; the original bytes travel separately.
    """
    try:
        return pa.RecordBatch.from_pylist(rows, schema=schema)
    except (pa.ArrowException, UnicodeError, ValueError, TypeError, OverflowError):
        pass  # some row is bad: find it below, the others stay as they are
    fixed = []
    for row in rows:
        try:
            pa.RecordBatch.from_pylist([row], schema=schema)
            fixed.append(row)
        except (pa.ArrowException, UnicodeError, ValueError, TypeError, OverflowError) as exc:
            fixed.append(_as_error(row, schema, exc))
    return pa.RecordBatch.from_pylist(fixed, schema=schema)


def _as_error(row: dict[str, Any], schema: pa.Schema, exc: BaseException) -> dict[str, Any]:
    clean = sanitize(row)
    if clean.get("error_reason"):
        return clean  # already a dead letter: its first error is the one that counts
    try:
        pa.RecordBatch.from_pylist([clean], schema=schema)
    except (pa.ArrowException, UnicodeError, ValueError, TypeError, OverflowError):
        # Not a text problem (an out-of-range number): keep only what names the record.
        keep = ("kind", "device_key", "tenant", "message_id", "gateway_id", "received_ms")
        clean = {k: clean.get(k) for k in keep if k in schema.names}
        clean = {
            k: v if not isinstance(v, int) or abs(v) < 2**63 else None for k, v in clean.items()
        }
    return clean | {
        "error_stage": STAGE,
        "error_reason": REASON,
        "error_class": type(exc).__name__,
        "error_message": sanitize(str(exc))[:1000],
    }
