"""Units: any spelling the pint units library knows, converted to one canonical unit per quantity.

The canonical units are the ones ``event.proto`` lists (``Measurement.unit``). pint parses a
spelling once (``°C``, ``degC``, ``hPa``, ``mbar``, ``psi``, ``kW``, ``Wh``, ``l/min``, every
SI prefix...); the result is cached per spelling as ``(scale, offset, canonical)``, so
converting a value on the hot path is one dict lookup and ``value * scale + offset``.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Any

#: Canonical unit (the name written into events) -> pint unit, per quantity. Add a quantity
#: here and to the list in proto/headwater/events/v1/event.proto together.
CANONICAL: dict[str, str] = {
    "celsius": "degC",  # temperature
    "pascal": "Pa",  # pressure
    "percent": "percent",  # humidity, ratios, anything dimensionless with a unit
    "volt": "V",  # voltage
    "ampere": "A",  # current
    "watt": "W",  # power
    "joule": "J",  # energy
    "cubic_meter_per_second": "m**3/s",  # volume flow
    "kilogram_per_second": "kg/s",  # mass flow
    "hertz": "Hz",  # frequency (and rotational speed: rpm)
    "meter": "m",  # length
    "kilogram": "kg",  # mass
    "meter_per_second": "m/s",  # speed
}

#: Vendor shorthands that pint reads as something else ("C" is coulomb, "F" farad, "pct"
#: picocarat, "%RH" percent-ronnahenry, "k" Boltzmann's constant), reads in a way that
#: surprises (rpm), or does not know ("ratio"). Everything else is pint's.
ALIASES: dict[str, str] = {
    "C": "degC",
    "c": "degC",
    "F": "degF",
    "f": "degF",
    "k": "K",
    # pint's revolution is 2*pi radians, so its rpm converts to 0.105 Hz; a revolution per
    # minute is one cycle per minute (1/60 Hz).
    "rpm": "1/min",
    "RPM": "1/min",
    "ratio": "dimensionless",
    "pct": "percent",
    "%RH": "percent",
    "%rh": "percent",
    "RH": "percent",
    "rh": "percent",
}

# Untrusted text goes to pint's parser: short strings of unit characters only, and small
# exponents, so a payload cannot make it do much work.
_MAX_LEN = 40
_ALLOWED = re.compile(r"[A-Za-z0-9 _.%°µμ²³/*^·()\-]+")
_BIG_EXPONENT = re.compile(r"(\*\*|\^)\s*-?\d{2,}")
# "m3/h", "m2": a trailing 2 or 3 on a length symbol is an exponent, as in "m³".
_SHORT_EXPONENT = re.compile(r"\b(m|cm|mm|dm|km|ft|in)([23])\b")


class UnitError(ValueError):
    """A unit that cannot be converted; the message names the unit and why."""


@dataclass(frozen=True)
class Conversion:
    """How to turn a value in some unit into its canonical unit: ``value * scale + offset``."""

    canonical: str
    scale: float
    offset: float


_CACHE: dict[str, Conversion | UnitError] = {}
#: Spellings remembered, good and bad; hostile payloads may send endless new ones.
_CACHE_MAX = 4096
_lock = threading.Lock()
_registry: Any = None
_by_dimension: dict[Any, str] = {}


def conversion(unit: str) -> Conversion:
    """Return the cached conversion of ``unit`` to its quantity's canonical unit.

    Raises:
        UnitError: pint does not know the unit, or its quantity has no canonical unit.
    """
    found = _CACHE.get(unit)
    if found is None:
        found = _resolve(unit)
        if len(_CACHE) < _CACHE_MAX:
            _CACHE[unit] = found
    if isinstance(found, UnitError):
        raise found
    return found


def convert(value: float, unit: str) -> tuple[float, str]:
    """Return ``(value in the canonical unit, canonical unit name)``.

    A converted value is rounded to 12 significant digits, so float noise of the conversion
    (70.7 degF -> 21.500000000000004) does not leak into events while small magnitudes
    (l/min in m³/s) keep their precision. A value already canonical passes unchanged.
    """
    c = conversion(unit)
    if c.scale == 1.0 and c.offset == 0.0:
        return value, c.canonical
    converted = value * c.scale + c.offset
    return float(f"{converted:.12g}"), c.canonical


def _ureg() -> Any:
    # Built on first use (~0.4 s), once per process: Spark's Python workers each pay it once.
    global _registry
    with _lock:
        if _registry is None:
            import pint

            ureg: Any = pint.UnitRegistry(autoconvert_offset_to_baseunit=True)
            for name, spec in CANONICAL.items():
                _by_dimension[ureg.parse_units(spec).dimensionality] = name
            _registry = ureg
    return _registry


def _resolve(unit: str) -> Conversion | UnitError:
    spelling = unit.strip()
    if not spelling:
        return UnitError("empty unit")
    if len(spelling) > _MAX_LEN or not _ALLOWED.fullmatch(spelling):
        return UnitError(f"unknown unit {unit[:_MAX_LEN]!r}")
    if _BIG_EXPONENT.search(spelling):
        return UnitError(f"unknown unit {unit!r} (exponent too large)")
    ureg = _ureg()
    text = _SHORT_EXPONENT.sub(r"\1**\2", ALIASES.get(spelling, spelling))
    parsed = _parse(ureg, text, case_sensitive=True)
    if parsed is None or parsed.dimensionality not in _by_dimension:
        # "kpa", "mv", "pa": lower-cased symbols are common in device payloads. Accepted only
        # when the case-insensitive reading is a quantity we know (never "kg" -> kilogauss).
        relaxed = _parse(ureg, text, case_sensitive=False)
        if relaxed is not None and relaxed.dimensionality in _by_dimension:
            parsed = relaxed
    if parsed is None:
        return UnitError(f"unknown unit {unit!r}")
    canonical = _by_dimension.get(parsed.dimensionality)
    if canonical is None:
        return UnitError(
            f"unit {unit!r} ({parsed}, {parsed.dimensionality}) is not a quantity with a "
            f"canonical unit ({', '.join(CANONICAL)})"
        )
    try:
        target = ureg.parse_units(CANONICAL[canonical])
        zero = float(ureg.Quantity(0.0, parsed).to(target).magnitude)
        one = float(ureg.Quantity(1.0, parsed).to(target).magnitude)
    except Exception as exc:  # e.g. a temperature difference (delta_degC) to a temperature
        return UnitError(f"unit {unit!r} cannot be converted to {canonical}: {exc}")
    return Conversion(canonical, one - zero, zero)


def _parse(ureg: Any, text: str, case_sensitive: bool) -> Any:
    try:
        return ureg.parse_units(text, case_sensitive=case_sensitive)
    except Exception:  # pint raises many kinds (UndefinedUnitError, ValueError, ...)
        return None
