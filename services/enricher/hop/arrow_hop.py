"""The Python hop before the JVM keyed state: decode and normalize whole Arrow batches.

Stateless, in one scalar Arrow UDF over batches (``arrow_udf``, an iterator of batches).
Spark sends it only what decoding reads (``inputs``: the source topic, the device key, the
record's value and the few headers decode reads, taken out of the headers array in Spark
SQL), and it returns one ``HOP`` struct per row: the decoded and normalized columns the JVM
operator reads, errors as values. The keyed rows' own columns (tenant, device key, source
coordinates, value, headers) stay in the JVM beside the call and are joined to its result
there (Spark's ``ArrowEvalPython``): writing them to Arrow for Python and reading them back
was most of the JVM's CPU for the hop (docs/benchmarks.md, issue 27).

Each message is decoded for the key it was grouped by (``decode.decode_for_key``); the
batch's messages are then normalized together, grouped by media type
(``normalize.normalize_batch``), each to the columns ``normalize.normalize_message`` gives it
alone, the conversion of every unit a Sparkplug B message names included (``units``: the JVM
has no unit library and keeps them with the device's definitions). Each message has one CPU
budget for both steps (``budget.each``): a record whose decoding uses it up is a dead letter
of its own, and what decoding used is taken off what normalizing may use.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from operator import itemgetter
from typing import Any

import pyarrow as pa
from pyspark.sql import Column
from pyspark.sql import functions as F

from headwater import record_headers as rh
from headwater.enricher.hop import budget as budgets
from headwater.enricher.hop import worker_gc
from headwater.enricher.hop.decode import (
    decode_for_key,
    decode_ingest,
    normalizable,
    over_budget,
)
from headwater.enricher.hop.normalize import normalize_batch
from headwater.enricher.hop.schema import (
    DECODED_FIELDS,
    NORMALIZED_FIELDS,
    UNITS,
    field_names,
    fields,
)
from headwater.enricher.source.keys import last_header

#: Decoded columns the hop does not return: the key (the JVM has it) and what the JVM operator
#: never reads (the payload's meaning is in the normalized columns, its bytes in ``value``).
_NOT_RETURNED = ("tenant", "device_key", "content_type", "payload", "endpoint")
#: The struct the hop returns per row, as a DDL field list; the JVM reads its fields by name.
HOP = ", ".join(
    [f for f in fields(DECODED_FIELDS) if f.split(" ")[0] not in _NOT_RETURNED]
    + [NORMALIZED_FIELDS, UNITS]
)
#: The error columns, which both steps fill (decode's for what it refuses, normalize's for
#: the rest).
_DECODE_ERRORS = frozenset({"error_stage", "error_reason", "error_class", "error_message"})
#: The columns the normalize step fills (``normalize.normalize_message``'s, errors included).
_NORMALIZE_COLUMNS = frozenset(field_names(NORMALIZED_FIELDS) + field_names(UNITS)) | _DECODE_ERRORS
#: The headers decode reads of an ingest record (tenant is the key's; endpoint is not read),
#: in the order ``_decoding`` unpacks them.
HEADERS = (rh.GATEWAY_ID, rh.MESSAGE_ID, rh.RECEIVED_AT_MS)


def inputs() -> list[Column]:
    """Return the hop's arguments over keyed rows (``keys.key_columns``), in Spark SQL.

    Each header is the value of the last one of its name, as ``decode.header_map`` reads
    them (null when absent; ``keys.last_header``).
    """
    headers = [last_header(name) for name in HEADERS]
    return [F.col("src_topic"), F.col("device_key"), F.col("value"), *headers]


def hop_rows(columns: list[pa.Array], master_topic: str) -> list[dict[str, Any]]:
    """Return a batch of the hop's ``inputs`` decoded and normalized; never raises.

    The dicts hold the columns a message has (Arrow makes the others null). The hop itself
    returns :func:`hop_struct`, the same rows as a struct array.
    """
    msgs, todo, normalized = _decoded_and_normalized(columns, master_topic)
    for i, columns_of_msg in zip(todo, normalized, strict=True):
        msgs[i] |= columns_of_msg
    return msgs


def hop_struct(columns: list[pa.Array], master_topic: str, schema: pa.Schema) -> pa.StructArray:
    """Return ``hop_rows``' rows as one struct array of ``schema`` (``HOP``'s); never raises.

    The same array as ``pa.RecordBatch.from_pylist(hop_rows(...), schema).to_struct_array()``
    (``tests/enricher/test_hop_fast_paths.py``), built a column at a time: no merged row
    dict per message, and no test per row and field of whether the row has the field. A
    column the decode step fills is read from every decoded row; one the normalize step
    fills (and its error columns) from the normalized rows, null for a row not normalized,
    and all nulls without a look at the rows when no normalized row has it (the alarm and
    Sparkplug columns of a telemetry batch). A normalized row had no decode error
    (``decode.normalizable``: the four error columns are set together), so its error
    columns are normalize's where it has them.
    """
    msgs, todo, normalized = _decoded_and_normalized(columns, master_topic)
    n = len(msgs)
    every_row = len(todo) == n  # then todo is 0..n-1, in order
    present = set().union(*normalized)  # most rows have 3 of the 14 (no alarm, no units)
    arrays = []
    for f in schema.names:
        if f not in _NORMALIZE_COLUMNS:
            column = list(map(itemgetter(f), msgs))
        elif f in present and every_row:
            column = [m.get(f) for m in normalized]
        else:  # decode's column (its errors) or nulls, then normalize's values where it has one
            column = list(map(itemgetter(f), msgs)) if f in _DECODE_ERRORS else [None] * n
            if f in present:
                for i, m in zip(todo, normalized, strict=True):
                    column[i] = m.get(f)
        arrays.append(pa.array(column, type=schema.field(f).type))
    return pa.StructArray.from_arrays(arrays, fields=list(schema))


def _decoded_and_normalized(
    columns: list[pa.Array], master_topic: str
) -> tuple[list[dict[str, Any]], list[int], list[dict[str, Any]]]:
    """Decode a batch, then normalize what decoded.

    Returns the decoded rows, the indexes of those normalized (in order) and their
    normalized columns (normalize's errors included).
    """
    topics, keys, values, *headers = (c.to_pylist() for c in columns)  # no row dicts
    records = list(zip(topics, keys, values, *headers, strict=True))
    b = budgets.current()
    msgs, spent = budgets.each_with_cost(b, _decoding, records, master_topic)
    for i, msg in enumerate(msgs):
        if isinstance(msg, BaseException):  # decode never raises: over its budget
            topic, key, _, *found = records[i]
            text = _over_budget_text(b)
            msgs[i] = over_budget(topic, key, _pairs(found), master_topic, text)
    todo = [i for i, m in enumerate(msgs) if normalizable(m)]
    normalized = normalize_batch(
        [(msgs[i]["content_type"], msgs[i]["payload"]) for i in todo],
        b,
        spent=[spent[i] for i in todo],
    )
    return msgs, todo, normalized


def _pairs(found: Sequence[bytes | None]) -> list[tuple[str, bytes]]:
    """The headers decode reads, as ``(name, value)``, of the ones a record has."""
    return [(name, v) for name, v in zip(HEADERS, found, strict=True) if v is not None]


def _decoding(records: Sequence[tuple[Any, ...]], master_topic: str) -> Iterator[dict[str, Any]]:
    """Yield each record decoded for its key (``budget.each`` charges it to its message)."""
    for topic, key, value, gateway_id, message_id, received_at in records:
        if topic == master_topic:
            found = (gateway_id, message_id, received_at)
            yield decode_for_key(topic, key, value, _pairs(found), master_topic)
        else:  # the same columns, without a header list and map per record
            yield decode_ingest(key, value, gateway_id, message_id, received_at)


def _over_budget_text(b: budgets.Budget) -> str:
    return (
        f"decoding the record took more than {b.cpu_seconds * 1000:g} ms of CPU time, its whole "
        f"budget ({b.variable('cpu_seconds')})"
    )


def decoder(
    master_topic: str, schema: pa.Schema
) -> Callable[[Iterator[tuple[pa.Array, ...]]], Iterator[pa.Array]]:
    """Return the Arrow UDF's function (picklable: it closes over strings and a schema).

    ``schema`` is ``HOP``'s; each batch of ``inputs`` gives one struct array of it.
    """

    def run(batches: Iterator[tuple[pa.Array, ...]]) -> Iterator[pa.Array]:
        for columns in batches:
            with worker_gc.batch_scope():
                out = hop_struct(list(columns), master_topic, schema)
            yield out
        worker_gc.freeze_survivors()

    return run
