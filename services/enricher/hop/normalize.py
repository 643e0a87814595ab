"""Normalize step: vendor payloads -> common-format content, through a registry of normalizers.

Each normalizer (``headwater.enricher.hop.formats``, one module per format, plus those
installed packages add) turns one vendor format, named by the message's media type, into
measurements in canonical units (``units.py``) or an alarm. The media type is matched as RFC
9110 says (``media_type.py``). Whatever a normalizer returns passes one check here: names
non-empty, values finite, times in range, sizes within the budget. An unknown format or a
bad payload is a poison pill: ``error_*`` columns, never a raise. Every call runs under the
budget of ``budget.py`` (CPU time, payload and result sizes): one message can cost the
worker only so much, whatever it holds. The conversions of the units a Sparkplug B message
names (its ``units`` column, for the JVM) are that message's work too and count against its
budget: a birth naming thousands of new unit spellings is a dead letter, not a stall.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

from headwater.enricher.hop import budget as budgets
from headwater.enricher.hop import media_type, units
from headwater.enricher.hop.arrowsafe import REASON as ENCODE_REASON
from headwater.enricher.hop.arrowsafe import STAGE as ENCODE_STAGE
from headwater.enricher.hop.arrowsafe import encodable, sanitize
from headwater.enricher.hop.formats import (
    REGISTRY,
    BatchNormalizer,
    Measurement,
    Normalized,
    NormalizeError,
    batch_of,
    register,
)
from headwater.enricher.hop.formats.base import MAX_TIME_MS, MIN_TIME_MS, check_time, check_value
from headwater.enricher.hop.formats.registry import lookup

__all__ = [
    "REGISTRY",
    "NormalizeError",
    "Normalized",
    "normalize_batch",
    "normalize_message",
    "register",
]


#: The package of the built-in normalizers (formats/): their strings are checked cheaply.
_BUILT_IN = "headwater.enricher.hop.formats."


def normalize_message(content_type: str | None, payload: bytes | None) -> dict[str, Any]:
    """Return the ``NORMALIZED_FIELDS`` columns plus ``error_*`` ones; never raises.

    The work is bounded by this process's budget (``budget.current()``): a payload over its
    size, a call over its CPU time or a result over its sizes is a dead letter of reason
    ``NORMALIZE_TOO_LARGE`` or ``NORMALIZE_BUDGET``.
    """
    return normalize_batch([(content_type, payload)])[0]


def normalize_batch(
    rows: list[tuple[str | None, bytes | None]],
    budget: budgets.Budget | None = None,
    spent: Sequence[float] | None = None,
) -> list[dict[str, Any]]:
    """Return :func:`normalize_message` of each ``(content_type, payload)``, in order.

    Grouped by content type: each group's media type is parsed and looked up once, and its
    normalizer's batch form (``formats.batch_of``) runs over the group's payloads with the
    CPU-time interrupt armed once. Each message still has its own budget: one over it is a
    dead letter, the others go on. ``spent``: the CPU seconds each row already used of its
    budget (decoding its record, ``arrow_hop``): the budget is one per message, not per step.
    """
    b = budget or budgets.current()
    out: list[dict[str, Any]] = [{}] * len(rows)
    groups: dict[str | None, list[int]] = {}
    for i, (content_type, _) in enumerate(rows):
        groups.setdefault(content_type, []).append(i)
    for content_type, indexes in groups.items():
        try:
            media = media_type.parse(content_type or "")
        except media_type.MediaTypeError as exc:
            bad = _err("CONTENT_TYPE_INVALID", type(exc).__name__, str(exc))
            for i in indexes:
                out[i] = dict(bad)
            continue
        fn = lookup(media.essence)
        if fn is None:
            for i in indexes:
                out[i] = _err(
                    "UNKNOWN_FORMAT", "UnknownFormatError", f"no normalizer for {media.essence!r}"
                )
            continue
        todo: list[tuple[int, bytes]] = []
        for i in indexes:
            payload = rows[i][1] or b""
            if len(payload) > b.max_payload_bytes:
                out[i] = _err(
                    budgets.SIZE_REASON,
                    "SizeBudgetExceeded",
                    f"payload of {len(payload)} bytes is over the normalize budget of "
                    f"{b.max_payload_bytes} ({b.variable('max_payload_bytes')})",
                )
            else:
                todo.append((i, payload))
        if not todo:
            continue
        if not units.ready():
            units.warm()  # the units registry's one-off build (~0.4 s) is not a message's cost
        results = budgets.each(
            b,
            _converting(batch_of(fn)),
            [p for _, p in todo],
            media,
            spent=[spent[i] for i, _ in todo] if spent else None,
        )
        built_in = getattr(fn, "__module__", "").startswith(_BUILT_IN)
        other_charset = media.charset not in (None, "utf-8")  # once a group, not a message
        for (i, payload), result in zip(todo, results, strict=True):
            out[i] = _columns_of(result, payload, media, built_in, b, other_charset)
    return out


def _converting(batch: BatchNormalizer) -> Any:
    """Return ``batch`` yielding ``(result, its units rows)``: the unit work in the same budget.

    ``budget.each`` charges a message with what runs until its result is yielded, so the
    conversions are computed here, before the yield, not after the batch. An error the batch
    yields as its result stays one.
    """

    def run(payloads: Sequence[bytes], media: media_type.MediaType) -> Iterator[Any]:
        for result in batch(payloads, media):
            yield result if isinstance(result, BaseException) else (result, _unit_rows(result))

    return run


def _unit_rows(result: Any) -> list[dict[str, Any]] | None:
    """The ``units`` rows of the spellings a Sparkplug result names (None: it names none)."""
    if not isinstance(result, Normalized) or not (result.definitions or result.pending):
        return None
    spellings = {d.unit for d in result.definitions if d.unit}
    spellings |= {p.unit for p in result.pending if p.unit}
    return units.rows(sorted(spellings))


def _columns_of(
    result: Any,
    payload: bytes,
    media: media_type.MediaType,
    built_in: bool,
    b: budgets.Budget,
    other_charset: bool,
) -> dict[str, Any]:
    """The columns of one normalizer result and its units rows (or of the error instead)."""
    try:
        if isinstance(result, BaseException):
            raise result
        result, unit_rows = result
        out = columns(result, b)
        if unit_rows is not None:
            out["units"] = unit_rows
    except NormalizeError as exc:
        return _err(exc.reason, type(exc).__name__, str(exc))
    except budgets.CpuBudgetExceeded:
        return _err(
            budgets.CPU_REASON,
            "CpuBudgetExceeded",
            f"normalizing {media.essence} (unit conversions included) took more than "
            f"{b.cpu_seconds * 1000:g} ms of CPU time ({b.variable('cpu_seconds')})",
        )
    except budgets.SizeBudgetExceeded as exc:
        return _err(budgets.SIZE_REASON, "SizeBudgetExceeded", str(exc))
    except Exception as exc:  # a normalizer bug must not crash-loop the query on replay
        return _err("NORMALIZER_FAILED", type(exc).__name__, str(exc))
    escapes = other_charset or b"\\u" in payload
    if (escapes or not built_in) and not encodable(out):
        # A JSON escape such as "\ud800" parses to a string no encoder accepts (Arrow,
        # protobuf, Kafka): a dead letter now, not an exception in a later step. Built-in
        # normalizers can only produce one from such an escape, so only payloads that have
        # one (spelled in UTF-8, or in another charset where the bytes do not show it), or
        # another package's normalizer, pay for the check.
        return {
            "error_stage": ENCODE_STAGE,
            "error_reason": ENCODE_REASON,
            "error_class": "UnicodeEncodeError",
            "error_message": "a normalized string is not valid UTF-8 (lone surrogate?)",
        }
    return out


def columns(n: Normalized, budget: budgets.Budget | None = None) -> dict[str, Any]:
    """Return the columns of a normalizer's result, after the one check every result passes.

    Raises:
        NormalizeError: ``PAYLOAD_INVALID`` naming the field whose name is empty, whose value
            is not a finite number, or whose time is out of range.
        SizeBudgetExceeded: more readings than ``budget.max_measurements``, or a string
            longer than ``budget.max_text_chars``.
    """
    b = budget or budgets.current()
    if not isinstance(n, Normalized) or not n.event_type or not isinstance(n.event_type, str):
        raise TypeError(f"a normalizer returned {type(n).__name__}, not Normalized")
    count = len(n.measurements) + len(n.definitions) + len(n.pending)
    if count > b.max_measurements:
        raise budgets.SizeBudgetExceeded(
            f"{count} measurements, definitions and readings are over the normalize budget of "
            f"{b.max_measurements} ({b.variable('max_measurements')})"
        )
    limit = b.max_text_chars
    measurements = _checked_fast(n.measurements, limit)
    if measurements is None:
        measurements = _checked(n.measurements, limit)
    source_format = n.source_format  # event_type is a string (above)
    if len(n.event_type) > limit or (isinstance(source_format, str) and len(source_format) > limit):
        _text(n.event_type, limit)  # raises for the first over the limit, as always
        _text(source_format, limit)
    out: dict[str, Any] = {
        "event_type": n.event_type,
        "source_format": n.source_format,
        "measurements": measurements,
    }
    if n.alarm:
        out["alarm_code"], out["alarm_severity"], out["alarm_text"] = n.alarm
        _text(out["alarm_code"], limit)
        _text(out["alarm_text"], limit)
    if n.definitions or n.pending:
        for d in n.definitions:
            _text(d.name, limit)
            _text(d.unit, limit)
        for p in n.pending:
            _text(p.name, limit)
            _text(p.unit, limit)
        out["definitions"] = [d._asdict() for d in n.definitions]
        out["replaces_definitions"] = n.replaces_definitions
        out["pending"] = [
            p._asdict()
            | {
                "value": check_value(p.name or f"alias {p.alias}", p.value),
                "time_ms": check_time(p.name or f"alias {p.alias}", p.time_ms),
            }
            for p in n.pending
        ]
    return out


def _checked(ms: list[Any], limit: int) -> list[dict[str, Any]]:
    """The measurement rows of ``ms``, each checked (raises as ``columns`` says)."""
    measurements = []
    for m in ms:
        name, value, unit, *rest = m
        unit = str(unit)
        _text(name, limit)
        _text(unit, limit)
        measurements.append(
            {
                "name": name,
                "value": check_value(name, value),
                "unit": unit,
                "time_ms": check_time(name, rest[0] if rest else None),
            }
        )
    return measurements


def _checked_fast(ms: list[Any], limit: int) -> list[dict[str, Any]] | None:
    """The measurement rows of ``ms`` when every one is plainly valid, else None.

    The common case on the hot path, checked in one loop: a name that is a non-empty string,
    a finite float, a unit that is a string, no time or an integer one in range, no text
    over ``limit``. The same rows as ``columns``' full checks give them (a float is its own
    ``float()``, a ``str`` its own ``str()``); anything else (ints, other types, a failing
    check) returns None, and the full checks run and raise as they always did.
    """
    out = []
    isfinite = math.isfinite
    for m in ms:
        if type(m) is not Measurement:  # a plugin's plain tuple: the full checks
            return None
        name, value, unit, time_ms = m
        if (
            type(name) is not str
            or not name
            or len(name) > limit
            or type(value) is not float
            or not isfinite(value)
            or type(unit) is not str
            or len(unit) > limit
        ):
            return None
        if time_ms is not None and (
            type(time_ms) is not int or not MIN_TIME_MS <= time_ms <= MAX_TIME_MS
        ):
            return None
        out.append({"name": name, "value": value, "unit": unit, "time_ms": time_ms})
    return out


def _text(value: Any, limit: int) -> None:
    # Only length: types are checked where each value is used. Strings longer than the
    # budget are refused whole (no truncation: a cut name would be another metric's).
    if isinstance(value, str) and len(value) > limit:
        raise budgets.SizeBudgetExceeded(
            f"a normalized text of {len(value)} characters ({value[:40]!r}...) is over the "
            f"normalize budget of {limit} ({budgets.Budget.variable('max_text_chars')})"
        )


def _err(reason: str, cls: str, message: str) -> dict[str, Any]:
    return {
        "error_stage": "normalize",
        "error_reason": reason,
        "error_class": cls,
        # Sanitized: a parser's message may quote payload text that is not valid UTF-8.
        "error_message": sanitize(message[:1000]),
    }
