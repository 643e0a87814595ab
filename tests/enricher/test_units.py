"""Units through pint: spellings and prefixes to the canonical unit, cached per spelling."""

from __future__ import annotations

import pytest

from headwater.enricher.hop import units
from headwater.enricher.hop.normalize import normalize_message
from tests.support.kafkatools import GLOBEX


@pytest.mark.parametrize(
    ("value", "unit", "expected", "canonical"),
    [
        (21.5, "°C", 21.5, "celsius"),
        (21.5, "degC", 21.5, "celsius"),
        (21.5, "C", 21.5, "celsius"),
        (294.65, "K", 21.5, "celsius"),
        (70.7, "°F", 21.5, "celsius"),
        (70.7, "degF", 21.5, "celsius"),
        (70.7, "F", 21.5, "celsius"),
        (1013.25, "hPa", 101325.0, "pascal"),
        (1013.25, "mbar", 101325.0, "pascal"),
        (1.01325, "bar", 101325.0, "pascal"),
        (101.325, "kPa", 101325.0, "pascal"),
        (101.325, "kpa", 101325.0, "pascal"),  # lower-cased symbol, unambiguous
        (1.0, "psi", 6894.75729317, "pascal"),  # exactly 1 lbf/in²
        (3300, "mV", 3.3, "volt"),
        (3300, "mv", 3.3, "volt"),
        (2, "MV", 2_000_000.0, "volt"),  # SI: M is mega, not milli
        (250, "mA", 0.25, "ampere"),
        (1.5, "kW", 1500.0, "watt"),
        (1, "Wh", 3600.0, "joule"),
        (1, "kWh", 3_600_000.0, "joule"),
        (60, "l/min", 0.001, "cubic_meter_per_second"),
        (60, "L/min", 0.001, "cubic_meter_per_second"),
        (3.6, "m³/h", 0.001, "cubic_meter_per_second"),
        (3.6, "m3/h", 0.001, "cubic_meter_per_second"),
        (3.6, "kg/h", 0.001, "kilogram_per_second"),
        (1500, "rpm", 25.0, "hertz"),  # one revolution is one cycle, not 2π
        (2, "kHz", 2000.0, "hertz"),
        (1, "ft", 0.3048, "meter"),
        (250, "mm", 0.25, "meter"),
        (1, "lb", 0.45359237, "kilogram"),
        (500, "g", 0.5, "kilogram"),
        (36, "km/h", 10.0, "meter_per_second"),
        (0.401, "ratio", 40.1, "percent"),
        (40.1, "%", 40.1, "percent"),
        (40.1, "%RH", 40.1, "percent"),
        (40.1, "pct", 40.1, "percent"),
        (5000, "ppm", 0.5, "percent"),
    ],
)
def test_spellings_convert_to_the_canonical_unit(
    value: float, unit: str, expected: float, canonical: str
) -> None:
    got, name = units.convert(value, unit)
    assert name == canonical
    assert got == pytest.approx(expected, rel=1e-9)


def test_conversion_is_cached_per_spelling_as_scale_and_offset(monkeypatch) -> None:
    first = units.conversion("°F")
    assert (first.scale, first.offset) == pytest.approx((5 / 9, -160 / 9))

    def no_pint(unit: str) -> None:
        raise AssertionError(f"pint asked again for {unit!r}")

    monkeypatch.setattr(units, "_resolve", no_pint)
    assert units.conversion("°F") is first
    assert units.convert(212.0, "°F") == (100.0, "celsius")


@pytest.mark.parametrize(
    ("unit", "says"),
    [
        ("wibbles", "unknown unit 'wibbles'"),
        ("m²", "not a quantity with a canonical unit"),
        ("R", "not a quantity with a canonical unit"),
        ("m**999", "exponent too large"),
        ("x" * 200, "unknown unit"),
        ("1/0", "unknown unit"),
        ("", "empty unit"),
        ("delta_degC", "cannot be converted to celsius"),
    ],
)
def test_units_that_cannot_be_converted_are_named(unit: str, says: str) -> None:
    with pytest.raises(units.UnitError, match=says):
        units.convert(1.0, unit)


def test_an_unknown_unit_is_a_readable_dead_letter() -> None:
    out = normalize_message(GLOBEX, b'{"readings": [{"k": "torque", "v": 1, "u": "wibbles"}]}')
    assert out["error_reason"] == "UNIT_UNKNOWN"
    assert out["error_message"] == "torque: unknown unit 'wibbles'"


def test_converted_values_carry_no_float_noise_and_keep_small_magnitudes() -> None:
    assert units.convert(70.7, "°F")[0] == 21.5  # not 21.500000000000004
    assert units.convert(1, "l/min")[0] == pytest.approx(1.66666666667e-05, rel=1e-11)
