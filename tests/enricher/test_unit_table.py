"""The table of conversions in docs/enricher.md, converted row by row, covers every unit family.

The table is the test's data (one place: the docs cannot drift from what is checked). Its
values are worked out from each unit's definition, not from pint; every canonical unit and
every vendor shorthand the enricher accepts (``units.CANONICAL``, ``units.ALIASES``) must have
a row, and each quantity at least one row in another unit than its canonical one.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

import pytest

from headwater.enricher.hop import units

DOCS = Path(__file__).resolve().parents[2] / "docs" / "enricher.md"
HEADER = "| quantity (canonical unit) | reading | is | by definition |"


class Row(NamedTuple):
    """A row of the docs table: ``value unit`` is ``expected`` (a number or ``refused (why)``)."""

    canonical: str  # "" for refused units
    value: float
    unit: str
    expected: str


def _rows() -> list[Row]:
    lines = DOCS.read_text(encoding="utf-8").splitlines()
    start = lines.index(HEADER) + 2  # past the header and its rule
    out = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        quantity, reading, expected, _ = (c.strip() for c in line.strip("|").split("|"))
        canonical = re.search(r"\(`(\w+)`\)", quantity)
        value, unit = reading.strip("`").split(" ", 1)
        out.append(Row(canonical.group(1) if canonical else "", float(value), unit, expected))
    return out


ROWS = _rows()


@pytest.mark.parametrize("row", ROWS, ids=[f"{r.value:g} {r.unit}" for r in ROWS])
def test_each_row_converts_to_its_known_value(row: Row) -> None:
    if row.expected.startswith("refused"):
        why = re.fullmatch(r"refused \((.+)\)", row.expected)
        assert why, row
        with pytest.raises(units.UnitError, match=re.escape(why.group(1))):
            units.convert(row.value, row.unit)
        return
    got, canonical = units.convert(row.value, row.unit)
    assert canonical == row.canonical
    assert got == pytest.approx(float(row.expected.strip("`")), rel=1e-9, abs=1e-12)


def test_every_canonical_unit_and_shorthand_has_a_row() -> None:
    spelled = {r.unit for r in ROWS}
    assert set(units.CANONICAL.values()) - spelled == set()
    assert set(units.ALIASES) - spelled == set()
    for name, spec in units.CANONICAL.items():
        others = [r for r in ROWS if r.canonical == name and r.unit != spec]
        assert others, f"{name}: no row converts another unit to it"


def test_the_table_holds_the_refused_logarithmic_units() -> None:
    refused = {r.unit for r in ROWS if r.expected == "refused (logarithmic)"}
    assert {"dB", "dBm", "dBW", "dBu", "Np", "neper", "decade", "octave"} <= refused
