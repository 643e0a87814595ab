"""``headwater normalize``: a payload file in, the event or the dead-letter reason out."""

from __future__ import annotations

import json
import random
from pathlib import Path

from headwater.cli import main
from headwater_dev.devstack import vendors


def test_prints_the_event_of_a_good_payload(tmp_path: Path, capsys) -> None:
    f = tmp_path / "p.csv"
    f.write_bytes(b"\xef\xbb\xbf294.65, 0.401, 3300\r\n")
    assert main(["normalize", "-t", vendors.INITECH_TELEMETRY, str(f)]) == 0
    event = json.loads(capsys.readouterr().out)["events"][0]
    assert [(m["name"], m["value"], m["unit"]) for m in event["measurements"]] == [
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


def test_sparkplug_data_resolves_against_a_birth_file(tmp_path: Path, capsys) -> None:
    r = vendors.random_reading(random.Random(3))
    birth, data = tmp_path / "dbirth.bin", tmp_path / "ddata.bin"
    birth.write_bytes(vendors.sparkplug_payload(r, birth=True, now_ms=1_700_000_000_000))
    data.write_bytes(vendors.sparkplug_payload(r, birth=False, now_ms=1_700_000_000_000))
    assert main(["normalize", "-t", vendors.SPARKPLUG_DATA, str(data)]) == 1
    assert "alias 1 is not defined" in capsys.readouterr().out
    code = main(["normalize", "-t", vendors.SPARKPLUG_DATA, "--birth", str(birth), str(data)])
    assert code == 0
    ms = json.loads(capsys.readouterr().out)["events"][0]["measurements"]
    assert [(m["name"], m["unit"]) for m in ms] == [
        ("Process/Temperature", "celsius"),
        ("Process/Pressure", "pascal"),
        ("Supply/Voltage", "volt"),
    ]
    assert ms[2]["value"] == round(r.voltage_v, 3)
    assert ms[0]["time"] == "2023-11-14T22:13:20Z"
