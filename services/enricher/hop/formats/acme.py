"""ACME's JSON formats: telemetry v1 and alarms v1."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from headwater.enricher.hop import units
from headwater.enricher.hop.formats.base import (
    Measurement,
    Normalized,
    NormalizeError,
    batch_normalizer,
    load_json,
    measurer,
)
from headwater.enricher.hop.formats.registry import register
from headwater.enricher.hop.media_type import MediaType

#: Payload field -> (measurement name, unit the field is in).
_FIELDS = (("temp_c", "temperature", "degC"), ("hum_pct", "humidity", "percent"))
_SEVERITY = {"info": 1, "warning": 2, "critical": 3}


@register("application/vnd.acme.telemetry.v1+json")
@batch_normalizer
def acme_telemetry(
    payloads: Sequence[bytes], media: MediaType
) -> Iterator[Normalized | NormalizeError]:
    """ACME v1: ``{"temp_c": 21.5, "hum_pct": 40.1}`` (either field may be missing)."""
    # Units: once a batch. A float (nearly every reading) is measured here, without the
    # measurer's call and checks (``float(x)`` of a float is ``x``); other values go to it.
    # ``tuple.__new__`` makes the same Measurement without the named tuple's Python __new__,
    # and a unit already canonical (``apply`` returns the value) is not applied at all.
    fields = [
        (k, measurer(name, unit), name, c, c.scale == 1.0 and c.offset == 0.0)
        for k, name, unit in _FIELDS
        for c in (units.conversion(unit),)
    ]
    new, m = tuple.__new__, Measurement
    for payload in payloads:
        try:
            doc = load_json(payload, media)
            if not isinstance(doc, dict) or not {"temp_c", "hum_pct"} & doc.keys():
                raise NormalizeError(
                    "PAYLOAD_INVALID", "expected an object with temp_c and/or hum_pct"
                )
            values = [
                new(m, (name, v if same else c.apply(v), c.canonical, None))
                if type(v) is float
                else measured(v)
                for k, measured, name, c, same in fields
                if k in doc
                for v in (doc[k],)
            ]
            yield Normalized("telemetry", "acme.telemetry.v1+json", values)
        except NormalizeError as exc:
            yield exc


@register("application/vnd.acme.alarm.v1+json")
def acme_alarm(payload: bytes, media: MediaType) -> Normalized:
    """ACME alarm v1: ``{"code": "E42", "severity": "critical", "text": "..."}``."""
    doc = load_json(payload, media)
    if not isinstance(doc, dict) or not isinstance(doc.get("code"), str) or not doc["code"]:
        raise NormalizeError("PAYLOAD_INVALID", "expected an object with a code")
    severity = _SEVERITY.get(str(doc.get("severity", "")).lower(), 0)
    return Normalized(
        "alarm", "acme.alarm.v1+json", [], (doc["code"], severity, str(doc.get("text", "")))
    )
