"""``headwater normalize``: a payload file in, the normalized row or the dead-letter reason out."""

from __future__ import annotations

import json
import random
from pathlib import Path

from headwater.cli import main
from headwater_dev.devstack import vendors


def test_prints_the_normalized_row_of_a_good_payload(tmp_path: Path, capsys) -> None:
    f = tmp_path / "p.csv"
    f.write_bytes(b"\xef\xbb\xbf294.65, 0.401, 3300\r\n")
    assert main(["normalize", "-t", vendors.INITECH_TELEMETRY, str(f)]) == 0
    row = json.loads(capsys.readouterr().out)["normalized"]
    assert (row["event_type"], row["source_format"]) == ("telemetry", "initech.telemetry.v1+csv")
    assert [(m["name"], m["value"], m["unit"]) for m in row["measurements"]] == [
        ("temperature", 21.5, "celsius"),
        ("humidity", 40.1, "percent"),
        ("voltage", 3.3, "volt"),
    ]


def test_prints_the_dead_letter_reason_and_exits_1(tmp_path: Path, capsys) -> None:
    f = tmp_path / "p.json"
    f.write_bytes(b'{"readings": [{"k": "t", "v": 1, "u": "wibbles"}]}')
    assert main(["normalize", "-t", vendors.GLOBEX_TELEMETRY, str(f)]) == 1
    assert json.loads(capsys.readouterr().out) == {
        "dead_letter": {
            "stage": "normalize",
            "reason": "UNIT_UNKNOWN",
            "message": "t: unknown unit 'wibbles'",
        }
    }


def test_sparkplug_shows_the_readings_by_alias_and_the_births_unit_conversions(
    tmp_path: Path, capsys
) -> None:
    r = vendors.random_reading(random.Random(3))
    birth, data = tmp_path / "dbirth.bin", tmp_path / "ddata.bin"
    birth.write_bytes(vendors.sparkplug_payload(r, birth=True, now_ms=1_700_000_000_000))
    data.write_bytes(vendors.sparkplug_payload(r, birth=False, now_ms=1_700_000_000_000))
    # The data names its metrics by alias only: the enricher's state resolves them.
    assert main(["normalize", "-t", vendors.SPARKPLUG_DATA, str(data)]) == 0
    row = json.loads(capsys.readouterr().out)["normalized"]
    assert [(p["alias"], p["name"]) for p in row["pending"]] == [(1, ""), (2, ""), (3, "")]
    assert row["measurements"] == [] and row["units"] == []
    assert main(["normalize", "-t", vendors.SPARKPLUG_BIRTH, str(birth)]) == 0
    row = json.loads(capsys.readouterr().out)["normalized"]
    assert [(d["alias"], d["name"]) for d in row["definitions"]] == [
        (1, "Process/Temperature"),
        (2, "Process/Pressure"),
        (3, "Supply/Voltage"),
    ]
    assert {u["spelling"]: u["canonical"] for u in row["units"]} == {
        "°C": "celsius",
        "hPa": "pascal",
        "mV": "volt",
    }
