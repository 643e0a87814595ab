"""Globex's JSON telemetry v2: a list of readings, each with its own unit."""

from __future__ import annotations

from headwater.enricher.hop.formats.base import Normalized, NormalizeError, load_json, measure
from headwater.enricher.hop.formats.registry import register
from headwater.enricher.hop.media_type import MediaType


@register("application/vnd.globex.telemetry.v2+json")
def globex_telemetry(payload: bytes, media: MediaType) -> Normalized:
    """Globex v2: ``{"readings": [{"k": "temperature", "v": 70.7, "u": "°F"}, ...]}``."""
    doc = load_json(payload, media)
    readings = doc.get("readings") if isinstance(doc, dict) else None
    if not isinstance(readings, list) or not readings:
        raise NormalizeError("PAYLOAD_INVALID", "expected a non-empty readings list")
    values = []
    for i, r in enumerate(readings):
        if not isinstance(r, dict) or not isinstance(r.get("k"), str) or "u" not in r:
            raise NormalizeError("PAYLOAD_INVALID", f"readings[{i}]: expected k, v and u")
        values.append(measure(r["k"], r.get("v"), str(r["u"])))
    return Normalized("telemetry", "globex.telemetry.v2+json", values)
