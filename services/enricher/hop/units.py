"""Units: any spelling the pint units library knows, converted to one canonical unit per quantity.

The canonical units are the ones ``event.proto`` lists (``Measurement.unit``). pint parses a
spelling once (``°C``, ``degC``, ``hPa``, ``mbar``, ``psi``, ``kW``, ``Wh``, ``l/min``, every
SI prefix...); the result is cached per spelling as ``(scale, offset, canonical)``, so
converting a value on the hot path is one dict lookup and ``value * scale + offset``. Units
that no such formula converts (logarithmic ones: dB, dBm, dBW, neper, decade...) are refused,
never converted linearly.

Spellings come from payloads, and pint evaluates what it parses (``m**9**9**9`` is an
exponent tower it does not finish: the normalize budget's timer happens to interrupt that
one, measured, but a step that runs in C could not be), so a spelling reaches pint only
when it matches :data:`GRAMMAR`: at most a few unit
symbols joined by ``*``, ``/``, ``·`` or a space, each with at most one one-digit exponent.
Memory is bounded too: a spelling longer than the grammar allows is refused before any
lookup (it is never a cache key), the cache of results keeps the :data:`CACHE_MAX` spellings
used last, and pint's own caches are trimmed (``unit_registry``).
A spelling that cannot be converted is cached as its error *text*: an exception object
raised again and again would grow its traceback and pin the payloads it passed through.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from headwater.enricher.errors import EnricherError
from headwater.enricher.hop import unit_registry

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
    # Lower-cased symbols common in device payloads, each with one reading. Only these: pint's
    # case-insensitive reading is ambiguous and, where it is, chosen by hash order ("ma" was
    # milliampere in some processes, milliyear in others; "pa" pascal or picoampere), and
    # its "m" is milli where devices often mean mega ("mpa", "mw", "mwh", "mhz").
    "kpa": "kPa",
    "hpa": "hPa",
    "pa": "Pa",
    "kw": "kW",
    "kwh": "kWh",
    "wh": "Wh",
    "kv": "kV",
    "hz": "Hz",
    "khz": "kHz",
    "v": "V",
    "w": "W",
    "degc": "degC",
    "degf": "degF",
}
#: Why a lower-cased spelling outside ALIASES is refused (the error's end).
_CASE_HINT = (
    "symbols are case-sensitive as SI writes them, mV millivolt and MV megavolt; lower-cased, "
    "only kpa, hpa, pa, kw, kwh, wh, kv, hz, khz, v, w, degc and degf are read"
)

# Untrusted text goes to pint's parser only through this grammar: short, a few symbols,
# each with at most one exponent of one digit, so a payload cannot make it do much work.
_MAX_LEN = 40
#: Most factors in one spelling ("kg·m/s" has three).
MAX_FACTORS = 6
# A unit's name or symbol, "%" alone (pint reads "%%" as percent squared), or the 1 of "1/min".
_SYMBOL = r"(?:[A-Za-z_°µμΩ]+|%|1)"
# One exponent: "**-2", "^3", "²", or a bare 2/3 after a symbol ("m3"). Never two.
_POWER = r"(?:(?:\*\*|\^)\s*-?[1-9]|[²³]|[23](?![0-9]))?"
_JOIN = r"(?:\s*[*/·]\s*|\s+)"
GRAMMAR = re.compile(rf"{_SYMBOL}{_POWER}(?:{_JOIN}{_SYMBOL}{_POWER}){{0,{MAX_FACTORS - 1}}}")
_BIG_EXPONENT = re.compile(r"(\*\*|\^)\s*-?\d{2,}")
_STACKED = re.compile(r"(\*\*|\^)\s*-?\d+\s*(\*\*|\^)")
# "m3/h", "m2": a trailing 2 or 3 on a length symbol is an exponent, as in "m³".
_SHORT_EXPONENT = re.compile(r"\b(m|cm|mm|dm|km|ft|in)([23])\b")


class UnitError(EnricherError, ValueError):
    """A unit that cannot be converted; the message names the unit and why."""


@dataclass(frozen=True)
class Conversion:
    """How to turn a value in some unit into its canonical unit: ``value * scale + offset``."""

    canonical: str
    scale: float
    offset: float

    def apply(self, value: float) -> float:
        """Return ``value`` in the canonical unit (see :func:`convert` for the rounding)."""
        if self.scale == 1.0 and self.offset == 0.0:
            return value
        return float(f"{value * self.scale + self.offset:.12g}")


#: Spelling -> its conversion, or the text of why it has none (never an exception object),
#: the spelling used last at the end.
_CACHE: OrderedDict[str, Conversion | str] = OrderedDict()
#: Spellings remembered, good and bad (each at most ``_MAX_LEN`` characters); hostile payloads
#: may send endless new ones, and the ones used least recently make room.
CACHE_MAX = 4096
_by_dimension: dict[Any, str] = {}


def conversion(unit: str) -> Conversion:
    """Return the cached conversion of ``unit`` to its quantity's canonical unit.

    Raises:
        UnitError: pint does not know the unit, its quantity has no canonical unit, it is
            logarithmic, or the spelling is outside the grammar pint is trusted with (a new
            object each time).
    """
    key = unit if len(unit) <= _MAX_LEN else unit.strip()
    if len(key) > _MAX_LEN:  # refused before any lookup: never a key of any cache
        raise UnitError(f"unknown unit {key[:_MAX_LEN]!r} (longer than {_MAX_LEN} characters)")
    found = _CACHE.get(key)
    if found is None:
        try:
            found = _resolve(key)
        except Exception as exc:  # whatever pint or formatting raised: a text, like the rest
            found = f"unit {key!r} cannot be converted ({type(exc).__name__})"
        _CACHE[key] = found
        if len(_CACHE) > CACHE_MAX:
            _CACHE.popitem(last=False)
        unit_registry.trim()  # what pint cached for the spelling: ours now holds the result
    else:
        _CACHE.move_to_end(key)
    if isinstance(found, str):
        raise UnitError(found)
    return found


def rows(spellings: Iterable[str]) -> list[dict[str, Any]]:
    """Return the conversion of each spelling as a row of the hop's ``units`` column.

    The JVM has no unit library: it converts Sparkplug B readings with these rows. A spelling
    without a conversion gets its error text (the row's ``error``), never a raise.
    """
    out = []
    for spelling in spellings:
        try:
            c = conversion(spelling)
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


def convert(value: float, unit: str) -> tuple[float, str]:
    """Return ``(value in the canonical unit, canonical unit name)``.

    A converted value is rounded to 12 significant digits, so float noise of the conversion
    (70.7 degF -> 21.500000000000004) does not leak into events while small magnitudes
    (l/min in m³/s) keep their precision. A value already canonical passes unchanged.
    """
    c = conversion(unit)
    return c.apply(value), c.canonical


def ready() -> bool:
    """Return True once this process has built the units registry."""
    return bool(_by_dimension)


def warm() -> None:
    """Build the units registry now (once per process), outside any message's budget."""
    _ureg()


def _ureg() -> Any:
    # Built on first use (~0.4 s), once per process: Spark's Python workers each pay it once.
    ureg = unit_registry.registry()
    if not _by_dimension:
        _by_dimension.update(
            {ureg.parse_units(spec).dimensionality: name for name, spec in CANONICAL.items()}
        )
    return ureg


def _resolve(unit: str) -> Conversion | str:
    """Return the conversion of ``unit``, or the text of why there is none."""
    spelling = unit.strip()
    if not spelling:
        return "empty unit"
    shown = repr(unit)  # at most _MAX_LEN characters: conversion() refused longer ones
    if _STACKED.search(spelling):
        return f"unknown unit {shown} (stacked exponents)"
    if _BIG_EXPONENT.search(spelling):
        return f"unknown unit {shown} (exponent too large)"
    if spelling.count("%") > 1:
        return f"unknown unit {shown} (% more than once: pint would read percent squared)"
    if spelling not in ALIASES and not GRAMMAR.fullmatch(spelling):
        return f"unknown unit {shown} (not a unit spelling: symbols, * / · and one-digit powers)"
    ureg = _ureg()
    text = _SHORT_EXPONENT.sub(r"\1**\2", ALIASES.get(spelling, spelling))
    # Case-sensitive only: lower-cased symbols are read through ALIASES, never by pint's
    # case-insensitive reading (see ALIASES).
    parsed = _parse(ureg, text)
    if parsed is None:
        return f"unknown unit {shown}" + (f" ({_CASE_HINT})" if _read_lower(ureg, text) else "")
    canonical = _by_dimension.get(parsed.dimensionality)
    if canonical is None:
        return _quantity_text(shown, parsed)
    try:
        target = ureg.parse_units(CANONICAL[canonical])
        zero, one, two = (
            float(ureg.Quantity(x, parsed).to(target).magnitude) for x in (0.0, 1.0, 2.0)
        )
    except Exception as exc:  # e.g. a temperature difference (delta_degC) to a temperature
        return f"unit {shown} cannot be converted to {canonical}: {str(exc)[:200]}"
    # Two points define the conversion; a third on the same line shows that it is one. pint's
    # logarithmic units (dB, dBm, neper...) convert exponentially: 30 dBm is 1 W, but the
    # line through 0 and 1 dBm would give 0.00877 W.
    if abs(two - 2 * one + zero) > 1e-9 * max(abs(zero), abs(one), abs(two)):
        return (
            f"unit {shown} is logarithmic: not converted (its value in {canonical} is no "
            "value * scale + offset)"
        )
    return Conversion(canonical, one - zero, zero)


def _quantity_text(shown: str, parsed: Any) -> str:
    known = ", ".join(CANONICAL)
    try:
        # Formatting a parsed unit can itself fail (an exponent past int's digit limit
        # raises ValueError): the text then leaves the reading out, the error stays UnitError.
        what = f"{parsed}, {parsed.dimensionality}"[:200]
    except Exception:
        return f"unit {shown} is not a quantity with a canonical unit ({known})"
    return f"unit {shown} ({what}) is not a quantity with a canonical unit ({known})"


def _read_lower(ureg: Any, text: str) -> bool:
    """Whether pint's case-insensitive reading of ``text`` is a quantity we know (for the hint)."""
    try:
        parsed = ureg.parse_units(text, case_sensitive=False)
    except Exception:
        return False
    return parsed.dimensionality in _by_dimension


def _parse(ureg: Any, text: str) -> Any:
    try:
        return ureg.parse_units(text, case_sensitive=True)
    except Exception:  # pint raises many kinds (UndefinedUnitError, ValueError, ...)
        return None
