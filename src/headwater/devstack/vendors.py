"""Payloads in the vendor formats the simulated fleet speaks (and the enricher reads)."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

ACME_TELEMETRY = "application/vnd.acme.telemetry.v1+json"
GLOBEX_TELEMETRY = "application/vnd.globex.telemetry.v2+json"
INITECH_TELEMETRY = "text/vnd.initech.telemetry.v1+csv"
ACME_ALARM = "application/vnd.acme.alarm.v1+json"
TELEMETRY_FORMATS = (ACME_TELEMETRY, GLOBEX_TELEMETRY, INITECH_TELEMETRY)


@dataclass(frozen=True)
class Reading:
    """The true physical values behind a payload, in canonical units."""

    temperature_c: float
    humidity_pct: float
    pressure_pa: float
    voltage_v: float


def random_reading(rng: random.Random) -> Reading:
    """Return plausible factory-floor values."""
    return Reading(
        temperature_c=round(rng.uniform(15, 35), 2),
        humidity_pct=round(rng.uniform(20, 70), 1),
        pressure_pa=round(rng.uniform(99_000, 103_000), 0),
        voltage_v=round(rng.uniform(3.0, 3.6), 3),
    )


def telemetry_payload(content_type: str, r: Reading) -> bytes:
    """Encode ``r`` as the given vendor would."""
    if content_type == ACME_TELEMETRY:
        return json.dumps({"temp_c": r.temperature_c, "hum_pct": r.humidity_pct}).encode()
    if content_type == GLOBEX_TELEMETRY:
        fahrenheit = round(r.temperature_c * 9 / 5 + 32, 3)
        psi = round(r.pressure_pa / 6894.757, 5)
        readings = [
            {"k": "temperature", "v": fahrenheit, "u": "F"},
            {"k": "pressure", "v": psi, "u": "psi"},
        ]
        return json.dumps({"readings": readings}).encode()
    if content_type == INITECH_TELEMETRY:
        kelvin = round(r.temperature_c + 273.15, 2)
        return f"{kelvin},{r.humidity_pct / 100:.4f},{round(r.voltage_v * 1000)}".encode()
    raise ValueError(f"unknown telemetry format {content_type!r}")


def alarm_payload(rng: random.Random) -> bytes:
    """Return an ACME alarm."""
    code, severity, text = rng.choice(
        [
            ("E42", "critical", "spindle overheating"),
            ("W07", "warning", "filter clogging"),
            ("I01", "info", "door opened"),
        ]
    )
    return json.dumps({"code": code, "severity": severity, "text": text}).encode()


def poison_payload(content_type: str) -> bytes:
    """Return a payload that claims ``content_type`` but cannot be decoded."""
    return b"\xff\xfe not " + content_type.encode() + b" {"
