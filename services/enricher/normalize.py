"""Normalize step: vendor payloads -> common-format content, through a registry of normalizers.

Each normalizer (``headwater.enricher.formats``, one module per format, plus those installed
packages add) turns one vendor format, named by the message's media type, into measurements
in canonical units (``units.py``) or an alarm. The media type is matched as RFC 9110 says
(``media_type.py``). Whatever a normalizer returns passes one check here: names non-empty,
values finite, times in range. An unknown format or a bad payload is a poison pill:
``error_*`` columns, never a raise.
"""

from __future__ import annotations

from typing import Any

from headwater.enricher import media_type
from headwater.enricher.arrowsafe import REASON as ENCODE_REASON
from headwater.enricher.arrowsafe import STAGE as ENCODE_STAGE
from headwater.enricher.arrowsafe import encodable, sanitize
from headwater.enricher.formats import REGISTRY, Normalized, NormalizeError, register
from headwater.enricher.formats.base import check_time, check_value
from headwater.enricher.formats.registry import lookup

__all__ = ["REGISTRY", "NormalizeError", "Normalized", "normalize_message", "register"]


#: The package of the built-in normalizers (formats/): their strings are checked cheaply.
_BUILT_IN = "headwater.enricher.formats."


def normalize_message(content_type: str | None, payload: bytes | None) -> dict[str, Any]:
    """Return the ``NORMALIZED_FIELDS`` columns plus ``error_*`` ones; never raises."""
    try:
        media = media_type.parse(content_type or "")
    except media_type.MediaTypeError as exc:
        return _err("CONTENT_TYPE_INVALID", type(exc).__name__, str(exc))
    fn = lookup(media.essence)
    if fn is None:
        return _err("UNKNOWN_FORMAT", "UnknownFormatError", f"no normalizer for {media.essence!r}")
    try:
        out = columns(fn(payload or b"", media))
    except NormalizeError as exc:
        return _err(exc.reason, type(exc).__name__, str(exc))
    except Exception as exc:  # a normalizer bug must not crash-loop the query on replay
        return _err("NORMALIZER_FAILED", type(exc).__name__, str(exc))
    built_in = getattr(fn, "__module__", "").startswith(_BUILT_IN)
    if (b"\\u" in (payload or b"") or not built_in) and not encodable(out):
        # A JSON escape such as "\ud800" parses to a string no encoder accepts (Arrow,
        # protobuf, Kafka): a dead letter now, not an exception in a later step. Built-in
        # normalizers can only produce one from such an escape, so only payloads that have
        # one (or another package's normalizer) pay for the check.
        return {
            "error_stage": ENCODE_STAGE,
            "error_reason": ENCODE_REASON,
            "error_class": "UnicodeEncodeError",
            "error_message": "a normalized string is not valid UTF-8 (lone surrogate?)",
        }
    return out


def columns(n: Normalized) -> dict[str, Any]:
    """Return the columns of a normalizer's result, after the one check every result passes.

    Raises:
        NormalizeError: ``PAYLOAD_INVALID`` naming the field whose name is empty, whose value
            is not a finite number, or whose time is out of range.
    """
    if not isinstance(n, Normalized) or not n.event_type or not isinstance(n.event_type, str):
        raise TypeError(f"a normalizer returned {type(n).__name__}, not Normalized")
    measurements = []
    for m in n.measurements:
        name, value, unit, *rest = m
        measurements.append(
            {
                "name": name,
                "value": check_value(name, value),
                "unit": str(unit),
                "time_ms": check_time(name, rest[0] if rest else None),
            }
        )
    out: dict[str, Any] = {
        "event_type": n.event_type,
        "source_format": n.source_format,
        "measurements": measurements,
    }
    if n.alarm:
        out["alarm_code"], out["alarm_severity"], out["alarm_text"] = n.alarm
    if n.definitions or n.pending:
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


def _err(reason: str, cls: str, message: str) -> dict[str, Any]:
    return {
        "error_stage": "normalize",
        "error_reason": reason,
        "error_class": cls,
        # Sanitized: a parser's message may quote payload text that is not valid UTF-8.
        "error_message": sanitize(message[:1000]),
    }
