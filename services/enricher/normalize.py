"""Normalize step: vendor payloads -> common-format content, through a registry of normalizers.

Each normalizer turns one vendor format (named by the message's ``content_type``) into
measurements in canonical units (celsius, percent, pascal, volt) or an alarm. An unknown
format or a payload that does not parse is a poison pill: ``error_*`` columns, never a raise.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from headwater.enricher.schema import NORMALIZED_FIELDS, field_names
from headwater.enricher.schema import struct as _struct

#: Values are rounded so float noise from unit conversion does not leak into events.
_DIGITS = 6


class NormalizeError(ValueError):
    """A payload that does not match its format; ``reason`` is the dead-letter reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Normalized:
    """The common-format content of one message."""

    event_type: str
    source_format: str
    measurements: list[tuple[str, float, str]] = field(default_factory=list)
    alarm: tuple[str, int, str] | None = None


Normalizer = Callable[[bytes], Normalized]
#: content_type -> normalizer. Add a vendor format with :func:`register`.
REGISTRY: dict[str, Normalizer] = {}


def register(content_type: str) -> Callable[[Normalizer], Normalizer]:
    """Register the decorated function as the normalizer of ``content_type``."""

    def add(fn: Normalizer) -> Normalizer:
        REGISTRY[content_type] = fn
        return fn

    return add


# Unit -> (canonical unit, conversion). Keys are lower case.
UNITS: dict[str, tuple[str, Callable[[float], float]]] = {
    "c": ("celsius", lambda v: v),
    "celsius": ("celsius", lambda v: v),
    "f": ("celsius", lambda v: (v - 32.0) * 5.0 / 9.0),
    "k": ("celsius", lambda v: v - 273.15),
    "pa": ("pascal", lambda v: v),
    "kpa": ("pascal", lambda v: v * 1000.0),
    "psi": ("pascal", lambda v: v * 6894.757),
    "%": ("percent", lambda v: v),
    "pct": ("percent", lambda v: v),
    "ratio": ("percent", lambda v: v * 100.0),
    "v": ("volt", lambda v: v),
    "mv": ("volt", lambda v: v / 1000.0),
}


def measure(name: str, value: Any, unit: str) -> tuple[str, float, str]:
    """Return ``(name, value, canonical_unit)`` with ``value`` converted from ``unit``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise NormalizeError("PAYLOAD_INVALID", f"{name}: {value!r} is not a number")
    try:
        canonical, convert = UNITS[unit.lower()]
    except KeyError:
        raise NormalizeError("UNIT_UNKNOWN", f"{name}: unknown unit {unit!r}") from None
    return name, round(convert(float(value)), _DIGITS), canonical


def _json(payload: bytes) -> Any:
    try:
        return json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise NormalizeError("PAYLOAD_UNDECODABLE", str(exc)) from exc


@register("application/vnd.acme.telemetry.v1+json")
def acme_telemetry(payload: bytes) -> Normalized:
    """ACME v1: ``{"temp_c": 21.5, "hum_pct": 40.1}``."""
    doc = _json(payload)
    if not isinstance(doc, dict) or not {"temp_c", "hum_pct"} & doc.keys():
        raise NormalizeError("PAYLOAD_INVALID", "expected an object with temp_c and/or hum_pct")
    fields = (("temp_c", "temperature", "C"), ("hum_pct", "humidity", "%"))
    values = [measure(name, doc[k], unit) for k, name, unit in fields if k in doc]
    return Normalized("telemetry", "acme.telemetry.v1+json", values)


@register("application/vnd.globex.telemetry.v2+json")
def globex_telemetry(payload: bytes) -> Normalized:
    """Globex v2: ``{"readings": [{"k": "temperature", "v": 70.7, "u": "F"}, ...]}``."""
    doc = _json(payload)
    readings = doc.get("readings") if isinstance(doc, dict) else None
    if not isinstance(readings, list) or not readings:
        raise NormalizeError("PAYLOAD_INVALID", "expected a non-empty readings list")
    values = []
    for r in readings:
        if not isinstance(r, dict) or not isinstance(r.get("k"), str) or "u" not in r:
            raise NormalizeError("PAYLOAD_INVALID", f"bad reading {r!r}")
        values.append(measure(r["k"], r.get("v"), str(r["u"])))
    return Normalized("telemetry", "globex.telemetry.v2+json", values)


@register("text/vnd.initech.telemetry.v1+csv")
def initech_telemetry(payload: bytes) -> Normalized:
    """Initech v1: one CSV line ``temperature_k,humidity_ratio,voltage_mv``."""
    try:
        rows = list(csv.reader([payload.decode("ascii").strip()]))
        cells = [float(c) for c in rows[0]]
    except (UnicodeDecodeError, ValueError, IndexError) as exc:
        raise NormalizeError("PAYLOAD_UNDECODABLE", f"not a CSV line of numbers: {exc}") from exc
    if len(cells) != 3:
        raise NormalizeError("PAYLOAD_INVALID", f"expected 3 columns, got {len(cells)}")
    names = (("temperature", "K"), ("humidity", "ratio"), ("voltage", "mV"))
    values = [measure(n, v, u) for (n, u), v in zip(names, cells, strict=True)]
    return Normalized("telemetry", "initech.telemetry.v1+csv", values)


_SEVERITY = {"info": 1, "warning": 2, "critical": 3}


@register("application/vnd.acme.alarm.v1+json")
def acme_alarm(payload: bytes) -> Normalized:
    """ACME alarm v1: ``{"code": "E42", "severity": "critical", "text": "..."}``."""
    doc = _json(payload)
    if not isinstance(doc, dict) or not isinstance(doc.get("code"), str) or not doc["code"]:
        raise NormalizeError("PAYLOAD_INVALID", "expected an object with a code")
    severity = _SEVERITY.get(str(doc.get("severity", "")).lower(), 0)
    return Normalized(
        "alarm", "acme.alarm.v1+json", [], (doc["code"], severity, str(doc.get("text", "")))
    )


def normalize_message(content_type: str | None, payload: bytes | None) -> dict[str, Any]:
    """Return the ``NORMALIZED_FIELDS`` columns plus ``error_*`` ones; never raises."""
    out: dict[str, Any] = {}
    fn = REGISTRY.get(content_type or "")
    if fn is None:
        return out | _err(
            "UNKNOWN_FORMAT", "UnknownFormatError", f"no normalizer for {content_type!r}"
        )
    try:
        n = fn(payload or b"")
    except NormalizeError as exc:
        return out | _err(exc.reason, type(exc).__name__, str(exc))
    except Exception as exc:  # a normalizer bug must not crash-loop the query on replay
        return out | _err("NORMALIZER_FAILED", type(exc).__name__, str(exc))
    out = {"event_type": n.event_type, "source_format": n.source_format}
    out["measurements"] = [{"name": a, "value": b, "unit": c} for a, b, c in n.measurements]
    if n.alarm:
        out["alarm_code"], out["alarm_severity"], out["alarm_text"] = n.alarm
    return out


def _err(reason: str, cls: str, message: str) -> dict[str, Any]:
    return {
        "error_stage": "normalize",
        "error_reason": reason,
        "error_class": cls,
        "error_message": message[:1000],
    }


_ERRORS = ("error_stage", "error_reason", "error_class", "error_message")


def normalize(df: DataFrame) -> DataFrame:
    """Add the common-format columns to decoded ingest rows (``NORMALIZED_FIELDS``).

    Rows that already failed (``error_reason`` set) or are master records pass through
    unchanged; a normalize failure fills the ``error_*`` columns with stage "normalize".
    """
    keep = [f for f in df.schema.fields if f.name not in _ERRORS]
    added = _struct(NORMALIZED_FIELDS).fields
    errors = [df.schema[name] for name in _ERRORS]
    out_schema = StructType(keep + added + errors)
    names = field_names(NORMALIZED_FIELDS)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        # mapInArrow: only the columns normalization needs become Python objects.
        arrow = to_arrow_schema(out_schema)
        tail = pa.schema(list(arrow)[len(keep) :])
        for b in batches:
            cols = b.select(["kind", "content_type", "payload", *_ERRORS]).to_pydict()
            rows = []
            for i, kind in enumerate(cols["kind"]):
                row = dict.fromkeys(names) | {e: cols[e][i] for e in _ERRORS}
                if kind == "ingest" and not cols["error_reason"][i]:
                    row |= normalize_message(cols["content_type"][i], cols["payload"][i])
                rows.append(row)
            new = pa.RecordBatch.from_pylist(rows, schema=tail)
            kept = [b.column(f.name) for f in keep]
            yield pa.RecordBatch.from_arrays(kept + new.columns, schema=arrow)

    return df.mapInArrow(run, out_schema)
