"""Master-data files: each format read with its lines; bad files refused with file:line."""

from __future__ import annotations

from pathlib import Path

import pytest

from headwater.master.records import MasterFileError, read_file, read_files

CSV = """tenant,device_id,site,area_code,vendor_format,model
acme,dev-1,plant-a,A1,acme.v1+json,m1

acme,dev-2,plant-a,A2,acme.v1+json,
"""
JSON = """[
  {"tenant": "acme", "device_id": "dev-1", "vendor_format": "acme.v1+json"},
  {"tenant": "globex", "device_id": "dev-1",
   "vendor_format": "globex.v1+json", "site": "s"}
]
"""
YAML = """devices:
  - tenant: acme
    device_id: dev-1
    vendor_format: acme.v1+json
  - {tenant: acme, device_id: "007", vendor_format: acme.v1+json, model: m2}
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("name", "text", "lines", "keys"),
    [
        ("d.csv", CSV, [2, 4], ["acme/dev-1", "acme/dev-2"]),
        ("d.json", JSON, [2, 3], ["acme/dev-1", "globex/dev-1"]),
        ("d.yaml", YAML, [2, 5], ["acme/dev-1", "acme/007"]),
        ("d.jsonl", '{"tenant":"a","device_id":"x","vendor_format":"f"}\n', [1], ["a/x"]),
    ],
)
def test_each_format_reads_records_with_their_lines(tmp_path, name, text, lines, keys):
    located = read_file(write(tmp_path, name, text))
    assert [x.key for x in located] == keys
    assert [x.where for x in located] == [f"{tmp_path / name}:{n}" for n in lines]


def test_fields_are_carried_into_the_record(tmp_path):
    first, second = read_file(write(tmp_path, "d.csv", CSV))
    assert (first.record.site, first.record.area_code, first.record.model) == (
        "plant-a",
        "A1",
        "m1",
    )
    assert second.record.model == ""


@pytest.mark.parametrize(
    ("name", "text", "line", "words"),
    [
        ("bad.csv", "tenant,device_id,vendor_format\nacme,d1,f\nacme,,f\n", 3, "device_id"),
        ("bad.csv", "tenant,device_id,vendor_format\nacme,d/1,f\n", 2, "device_id 'd/1'"),
        ("bad.csv", "tenant,device_id,vendor_format,colour\nacme,d1,f,red\n", 2, "colour"),
        ("bad.csv", "device_id,vendor_format\nd1,f\n", 2, "tenant"),
        (
            "bad.json",
            '[\n {"tenant": "a", "device_id": "d", "vendor_format": "f"},\n {"x"\n]',
            4,
            "invalid JSON",
        ),
        ("bad.json", '[\n {"tenant": "a", "device_id": "d"}\n]\n', 2, "vendor_format"),
        (
            "bad.yaml",
            "- tenant: a\n  device_id: d\n  vendor_format: f\n"
            "- tenant: b\n  device_id: 7\n  vendor_format: f\n",
            4,
            "quote it",
        ),
        ("bad.yaml", "- tenant: a\n  device_id: [d\n", 3, "invalid YAML"),
        ("bad.yaml", "- tenant: 'a b'\n  device_id: d\n  vendor_format: f\n", 1, "tenant"),
        ("bad.txt", "anything", None, "unknown format"),
    ],
)
def test_a_bad_file_names_file_and_line(tmp_path, name, text, line, words):
    path = write(tmp_path, name, text)
    with pytest.raises(MasterFileError) as err:
        read_file(path)
    message = str(err.value)
    prefix = f"{path}:{line}:" if line else f"{path}:"
    assert message.startswith(prefix), message
    assert words in message


def test_a_device_listed_twice_across_files_is_refused(tmp_path):
    a = write(tmp_path, "a.csv", "tenant,device_id,vendor_format\nacme,d1,f\n")
    b = write(tmp_path, "b.yaml", "- {tenant: acme, device_id: d1, vendor_format: g}\n")
    with pytest.raises(
        MasterFileError, match=rf"{b}:1: device acme/d1 is listed twice \(also at {a}:2\)"
    ):
        read_files([a, b])
