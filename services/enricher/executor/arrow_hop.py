"""The Python hop before the JVM keyed state: decode and normalize whole Arrow batches.

Stateless, in one ``mapInArrow``: raw keyed Kafka rows (``decode.key_columns``) in, the
``HOP`` columns out (``DECODED_FIELDS`` + ``NORMALIZED_FIELDS`` + the source fields, errors as
values) for ``jvm_state.apply``. Each message is decoded as the Python operator decodes it
(``decode.decode_keyed``); the batch's messages are then normalized together, grouped by
media type (``normalize.normalize_batch``), to the same columns ``decode.decode_row`` gives
one message, so both operators see identical messages. The JVM has no unit library: for
every unit a Sparkplug B message names (definitions and readings), the hop adds its
conversion (``units``), which the JVM keeps with the device's definitions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from headwater.enricher.executor import units, worker_gc
from headwater.enricher.executor.decode import decode_keyed, normalizable
from headwater.enricher.executor.normalize import normalize_batch
from headwater.enricher.executor.schema import DECODED_FIELDS, NORMALIZED_FIELDS, SOURCE_FIELDS

#: A unit spelling and how it converts (``units.Conversion``), or why it cannot.
UNITS = (
    "units array<struct<spelling:string,canonical:string,scale:double,offset:double,error:string>>"
)
#: The columns the hop writes and the JVM operator reads (by name).
HOP = f"{DECODED_FIELDS}, {NORMALIZED_FIELDS}, {SOURCE_FIELDS}, {UNITS}"
_KEYED = ("tenant", "device_key", "src_topic", "src_partition", "src_offset", "value", "headers")


def conversions(msg: dict[str, Any]) -> list[dict[str, Any]]:
    """Return the conversion of every unit the message's Sparkplug parts name."""
    spellings = {d["unit"] for d in msg.get("definitions") or [] if d.get("unit")}
    spellings |= {p["unit"] for p in msg.get("pending") or [] if p.get("unit")}
    out = []
    for spelling in sorted(spellings):
        try:
            c = units.conversion(spelling)
        except Exception as exc:  # UnitError, or any failure of the units library: data
            text = str(exc) or type(exc).__name__
            out.append(
                {"spelling": spelling, "canonical": "", "scale": 0.0, "offset": 0.0, "error": text}
            )
            continue
        out.append(
            {
                "spelling": spelling,
                "canonical": c.canonical,
                "scale": c.scale,
                "offset": c.offset,
                "error": "",
            }
        )
    return out


def hop_rows(batch: pa.RecordBatch, master_topic: str) -> list[dict[str, Any]]:
    """Return a batch of keyed rows decoded and normalized; never raises.

    The dicts hold the decoded and normalized columns a message has (Arrow makes the others
    null); :func:`decoder` takes the keyed rows' own columns from the batch instead.
    """
    columns = [batch.column(k).to_pylist() for k in _KEYED]  # column by column: no row dicts
    msgs = [decode_keyed(row, master_topic) for row in zip(*columns, strict=True)]
    todo = [m for m in msgs if normalizable(m)]
    normalized = normalize_batch([(m["content_type"], m["payload"]) for m in todo])
    for msg, columns_of_msg in zip(todo, normalized, strict=True):
        msg |= columns_of_msg
    for msg in msgs:  # (columns a message lacks are null in the batch: from_pylist)
        # The JVM reads the payload's meaning, never its bytes (the original is in ``value``):
        # not shipping it halves what the shuffle to the keyed state carries.
        msg["payload"] = None
        if msg.get("definitions") or msg.get("pending"):
            msg["units"] = conversions(msg)
    return msgs


def decoder(
    master_topic: str, schema: pa.Schema
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """Return the ``mapInArrow`` function (picklable: it closes over strings and a schema).

    The keyed rows' own columns (key, source coordinates, the record's value and headers)
    leave as they came, as Arrow arrays: only the decoded and normalized columns are built
    from Python objects (turning every header back into Arrow was a third of the hop's
    conversion work).
    """
    built = pa.schema([f for f in schema if f.name not in _KEYED])

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            out = pa.RecordBatch.from_pylist(hop_rows(batch, master_topic), schema=built)
            yield pa.RecordBatch.from_arrays(
                [_column(batch if f.name in _KEYED else out, f) for f in schema], schema=schema
            )
        worker_gc.freeze_survivors()

    return run


def _column(batch: pa.RecordBatch, field: pa.Field) -> pa.Array:
    column = batch.column(field.name)
    # Spark's Arrow writer and pyarrow may name a list's item field differently.
    return column if column.type == field.type else column.cast(field.type)
