"""Units through pint: spellings and prefixes to the canonical unit, cached per spelling."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys

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
        (101.325, "kpa", 101325.0, "pascal"),  # a lower-cased symbol of ALIASES
        (101325, "pa", 101325.0, "pascal"),  # never picoampere
        (1.5, "kw", 1500.0, "watt"),
        (1.0, "psi", 6894.75729317, "pascal"),  # exactly 1 lbf/in²
        (3300, "mV", 3.3, "volt"),
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


@pytest.mark.parametrize("unit", ["mv", "mpa", "mw", "mwh", "mhz", "mbar/s", "kpA"])
def test_a_lower_cased_milli_or_mega_is_refused_not_guessed(unit: str) -> None:
    # pint's case-insensitive reading made "mpa" millipascal and "mhz" millihertz, where
    # devices mean MPa and MHz as often as not: a factor of 10^9 either way.
    with pytest.raises(units.UnitError) as refused:
        units.convert(1.0, unit)
    assert str(refused.value).startswith(f"unknown unit {unit!r}") or "not a quantity" in str(
        refused.value
    )


def test_every_spelling_reads_the_same_in_every_process() -> None:
    # pint's case-insensitive candidates came in hash order: "ma" was milliampere in some
    # processes and milliyear in others, "pa" pascal or picoampere.
    script = (
        "import logging; logging.disable(logging.WARNING)\n"
        "from headwater.enricher.hop import units\n"
        "for u in ['ma', 'pa', 'mv', 'ms', 'mm', 'Gg', 'kpa', 'a', 'c']:\n"
        "    try: print(u, units.conversion(u))\n"
        "    except units.UnitError as e: print(u, 'refused', str(e)[:60])\n"
    )
    seen = {
        subprocess.run(
            [sys.executable, "-c", script],
            env={**os.environ, "PYTHONHASHSEED": str(seed)},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in (1, 2, 3, 4)
    }
    assert len(seen) == 1, seen


def test_an_unknown_unit_is_a_readable_dead_letter() -> None:
    out = normalize_message(GLOBEX, b'{"readings": [{"k": "torque", "v": 1, "u": "wibbles"}]}')
    assert out["error_reason"] == "UNIT_UNKNOWN"
    assert out["error_message"] == "torque: unknown unit 'wibbles'"


def test_converted_values_carry_no_float_noise_and_keep_small_magnitudes() -> None:
    assert units.convert(70.7, "°F")[0] == 21.5  # not 21.500000000000004
    assert units.convert(1, "l/min")[0] == pytest.approx(1.66666666667e-05, rel=1e-11)


# Logarithmic units (issue 35): pint converts them by their real formula, but a conversion
# here is value * scale + offset, a line through two points. The values pint gives are the
# right ones (30 dBm = 1 W = 0 dBW; -10 dBm = 0.1 mW; 3 dB = 199.5 %); the line through 0
# and 1 dBm gave 0.00877 W for 30 dBm and a negative power for -10 dBm. Refused instead.
@pytest.mark.parametrize(
    ("value", "unit", "right", "target", "linear_gave"),
    [
        (30, "dBm", 1.0, "W", 0.00877),
        (-10, "dBm", 0.0001, "W", -0.00159),
        (20, "dBW", 100.0, "W", 6.18),
        (0, "dBW", 1.0, "W", 1.0),  # where the line happens to meet the curve: refused too
        (3, "dB", 1.99526, "dimensionless", 1.777),
        (2, "decade", 100.0, "dimensionless", 19.0),
        (1, "Np", 7.389, "dimensionless", 7.389),
        (1, "neper", 7.389, "dimensionless", 7.389),
        (1, "octave", 2.0, "dimensionless", 2.0),
        (0, "dBu", 0.001, "mW", 0.001),
    ],
)
def test_logarithmic_units_are_refused_not_converted_linearly(
    value: float, unit: str, right: float, target: str, linear_gave: float
) -> None:
    ureg = units._ureg()
    assert ureg.Quantity(value, unit).to(target).magnitude == pytest.approx(right, rel=1e-3)
    zero, one = (ureg.Quantity(x, unit).to(target).magnitude for x in (0.0, 1.0))
    assert zero + value * (one - zero) == pytest.approx(linear_gave, rel=1e-2)  # the old way
    with pytest.raises(units.UnitError, match=rf"unit '{unit}' is logarithmic: not converted"):
        units.convert(value, unit)


def test_a_logarithmic_unit_is_a_dead_letter_of_globex_and_an_error_row_of_sparkplug() -> None:
    from tests.support.payloads import DBIRTH, sparkplug_metric, sparkplug_payload

    out = normalize_message(GLOBEX, b'{"readings": [{"k": "rssi", "v": -67, "u": "dBm"}]}')
    assert out["error_reason"] == "UNIT_UNKNOWN"
    assert out["error_message"].startswith("rssi: unit 'dBm' is logarithmic: not converted")
    birth = sparkplug_payload(sparkplug_metric("rssi", 1, 10, unit="dBm", double_value=-67.0))
    (row,) = normalize_message(DBIRTH, birth)["units"]
    assert row["spelling"] == "dBm" and "is logarithmic" in row["error"]


@pytest.mark.parametrize("unit", ["%%", "%%%", "% %", "%*%", "%/%", "%·%"])
def test_percent_more_than_once_is_refused(unit: str) -> None:
    # pint reads "%%" as percent squared: 50 "%%" would have been 0.5 %.
    with pytest.raises(units.UnitError, match=r"% more than once"):
        units.convert(50.0, unit)
    assert units.convert(50.0, "%") == (50.0, "percent")
    assert units.convert(50.0, "%RH") == (50.0, "percent")


def test_a_unit_longer_than_the_grammar_is_refused_before_any_lookup(monkeypatch) -> None:
    # A Globex unit of 200 KB of random hex, new in each message, was a key of the cache:
    # 4,096 of them are ~1 GiB per worker. Now it is never looked up, parsed or kept.
    def no_resolve(unit: str) -> None:
        raise AssertionError("a too-long unit was resolved")

    monkeypatch.setattr(units, "_resolve", no_resolve)
    cached = dict(units._CACHE)
    for i in range(3):
        unit = f"{i:x}" + "ab" * 100_000
        with pytest.raises(units.UnitError, match=r"longer than 40 characters"):
            units.convert(1.0, unit)
        out = normalize_message(
            GLOBEX, b'{"readings": [{"k": "t", "v": 1, "u": "%s"}]}' % unit.encode()
        )
        assert out["error_reason"] == "UNIT_UNKNOWN" and "longer than 40" in out["error_message"]
    assert dict(units._CACHE) == cached
    monkeypatch.undo()
    # Padding is not length: the spelling is what is left after stripping it.
    assert units.convert(21.5, " " * 60 + "°C" + " " * 60) == (21.5, "celsius")


def test_the_cache_keeps_the_spellings_used_last(monkeypatch) -> None:
    monkeypatch.setattr(units, "CACHE_MAX", 8)
    monkeypatch.setattr(units, "_CACHE", type(units._CACHE)())
    resolved: list[str] = []
    resolve = units._resolve

    def counting(unit: str):
        resolved.append(unit)
        return resolve(unit)

    monkeypatch.setattr(units, "_resolve", counting)
    for i in range(50):  # a stream of new spellings, and one the devices keep using
        assert units.convert(1.0, "kPa") == (1000.0, "pascal")
        with pytest.raises(units.UnitError):
            units.convert(1.0, f"wibble{i}")
        assert len(units._CACHE) <= 8
    assert resolved.count("kPa") == 1  # never evicted: always among the last used
    assert len(resolved) == 51


def test_pint_caches_are_trimmed_back_to_the_registry_they_were_built_with(monkeypatch) -> None:
    from headwater.enricher.hop import unit_registry

    # Each spelling leaves ~3 entries in pint's own caches, never evicted by pint: 40,000
    # spellings added 77 MB. Held here to a bound of 300 entries over the built registry.
    monkeypatch.setattr(unit_registry, "GROWTH_MAX", 300)
    units.warm()
    prefixes = ["", "k", "m", "n", "M", "G", "u", "c", "d", "h"]
    grown = []
    for a in prefixes:
        for b in prefixes:
            for c in prefixes[:4]:  # 400 spellings new to this process
                with pytest.raises(units.UnitError, match="not a quantity with a canonical"):
                    units.conversion(f"{a}Pa*{b}g*{c}s*cd*Hz*Hz")
                grown.append(unit_registry.growth())
    assert max(grown) <= 300
    trims = [after for before, after in itertools.pairwise(grown) if after < before]
    assert len(trims) >= 2, grown  # 400 spellings are well over 300 entries: trimmed repeatedly
    assert all(after <= 20 for after in trims), trims  # back to the built registry
    # The registry still converts right after the trims (new spellings: a fresh parse).
    assert units.convert(70.7, "degF") == (21.5, "celsius")
    assert units.convert(3.6, "hl/h") == (0.0001, "cubic_meter_per_second")  # 360 l/h
    assert units.convert(2, "MPa") == (2_000_000.0, "pascal")
