"""Master-data files: read CSV, JSON and YAML into checked ``DeviceMaster`` records.

Every record comes with where it was read (``file:line``), so an error says which line to
fix. A file is checked whole before anything is written: one bad record rejects the load.

Formats (one device per row, object or item; fields as in ``DeviceMaster``):

- CSV: a header row naming the columns, e.g. ``tenant,device_id,site,area_code,
  vendor_format,model``.
- JSON: an array of objects; ``.jsonl``/``.ndjson``: one object per line.
- YAML: a list of mappings, or a mapping with a ``devices:`` list.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from headwater.errors import HeadwaterError
from headwater.proto.master.v1.device_master_pb2 import DeviceMaster
from headwater.topics import scoped_key

#: Every field of a record; the first ones are required.
REQUIRED = ("tenant", "device_id", "vendor_format")
FIELDS = ("tenant", "device_id", "site", "area_code", "vendor_format", "model")
#: The ingest contract's rule for device ids (headwater.device.v1.DeviceMessage.device_id):
#: a master record another pattern could never match a message.
DEVICE_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
#: Tenants are the first part of the key "<tenant>/<device_id>": no "/" and no spaces.
TENANT = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")
MAX_TEXT = 256


class MasterFileError(HeadwaterError, ValueError):
    """A master-data file cannot be loaded; the message starts with ``file:line``."""


@dataclass(frozen=True)
class Located:
    """One record and where it was read."""

    record: DeviceMaster
    where: str

    @property
    def key(self) -> str:
        """The record's Kafka key, ``<tenant>/<device_id>``."""
        return scoped_key(self.record.tenant, self.record.device_id)


def to_record(fields: dict[str, Any], where: str) -> DeviceMaster:
    """Return ``fields`` as a checked ``DeviceMaster``; raise MasterFileError naming ``where``."""
    if not isinstance(fields, dict):
        raise MasterFileError(f"{where}: expected an object with {', '.join(FIELDS)}")
    unknown = sorted(set(fields) - set(FIELDS))
    if unknown:
        raise MasterFileError(
            f"{where}: unknown field(s) {', '.join(unknown)} (known: {', '.join(FIELDS)})"
        )
    values: dict[str, str] = {}
    for name in FIELDS:
        value = fields.get(name)
        if value is None:
            value = ""
        if not isinstance(value, str):
            # YAML reads 007 as 7 and yes as True: quoting keeps the text the file meant.
            raise MasterFileError(
                f"{where}: {name} must be text, not {type(value).__name__} (quote it)"
            )
        values[name] = str(value).strip()
        if len(values[name]) > MAX_TEXT:
            raise MasterFileError(f"{where}: {name} is longer than {MAX_TEXT} characters")
    missing = [n for n in REQUIRED if not values[n]]
    if missing:
        raise MasterFileError(f"{where}: missing required field(s) {', '.join(missing)}")
    if not TENANT.match(values["tenant"]):
        raise MasterFileError(
            f"{where}: tenant {values['tenant']!r} must be 1-64 characters of [A-Za-z0-9._:-]"
        )
    if not DEVICE_ID.match(values["device_id"]):
        raise MasterFileError(
            f"{where}: device_id {values['device_id']!r} must be 1-128 characters of "
            "[A-Za-z0-9._:-] (the ingest contract's rule)"
        )
    return DeviceMaster(**values)


def read_files(paths: Iterable[Path]) -> list[Located]:
    """Read and check every file; raise MasterFileError at the first bad record.

    A device listed twice (in one file or across files) is an error too: which of the two
    should win is not for the tool to guess.
    """
    seen: dict[str, str] = {}
    out: list[Located] = []
    for path in paths:
        for item in read_file(path):
            if item.key in seen:
                raise MasterFileError(
                    f"{item.where}: device {item.key} is listed twice (also at {seen[item.key]})"
                )
            seen[item.key] = item.where
            out.append(item)
    return out


def read_file(path: Path) -> list[Located]:
    """Read one file by its extension (.csv, .json, .jsonl/.ndjson, .yaml/.yml)."""
    suffix = path.suffix.lower()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise MasterFileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise MasterFileError(f"{path}: not UTF-8 text ({exc.reason})") from None
    readers = {
        ".csv": _csv,
        ".json": _json,
        ".jsonl": _jsonl,
        ".ndjson": _jsonl,
        ".yaml": _yaml,
        ".yml": _yaml,
    }
    reader = readers.get(suffix)
    if reader is None:
        raise MasterFileError(f"{path}: unknown format {suffix!r}: use .csv, .json or .yaml")
    return [
        Located(to_record(fields, f"{path}:{line}"), f"{path}:{line}")
        for line, fields in reader(path, text)
    ]


def _csv(path: Path, text: str) -> Iterator[tuple[int, dict[str, Any]]]:
    reader = csv.DictReader(text.splitlines(), skipinitialspace=True)
    header = [h.strip() for h in reader.fieldnames or []]
    if not header:
        raise MasterFileError(f"{path}:1: empty file, expected a header row")
    reader.fieldnames = header
    for row in reader:
        if None in row:  # more cells than header columns
            raise MasterFileError(f"{path}:{reader.line_num}: more cells than header columns")
        if not any((v or "").strip() for v in row.values()):
            continue  # blank line
        yield reader.line_num, {k: v for k, v in row.items() if k}


def _line_of(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


def _json(path: Path, text: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """Walk a top-level array element by element, so each object keeps its line."""
    decoder = json.JSONDecoder()
    ws = re.compile(r"\s*")
    pos = ws.match(text, 0).end()  # type: ignore[union-attr]
    if not text.startswith("[", pos):
        raise MasterFileError(f"{path}:{_line_of(text, pos)}: expected a JSON array of devices")
    pos = ws.match(text, pos + 1).end()  # type: ignore[union-attr]
    if text.startswith("]", pos):
        return
    while True:
        try:
            value, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise MasterFileError(f"{path}:{exc.lineno}: invalid JSON: {exc.msg}") from None
        yield _line_of(text, pos), value
        pos = ws.match(text, end).end()  # type: ignore[union-attr]
        if text.startswith(",", pos):
            pos = ws.match(text, pos + 1).end()  # type: ignore[union-attr]
            continue
        if text.startswith("]", pos):
            rest = text[pos + 1 :].strip()
            if rest:
                raise MasterFileError(f"{path}:{_line_of(text, pos)}: text after the array")
            return
        raise MasterFileError(f"{path}:{_line_of(text, pos)}: invalid JSON: expected ',' or ']'")


def _jsonl(path: Path, text: str) -> Iterator[tuple[int, dict[str, Any]]]:
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except json.JSONDecodeError as exc:
            raise MasterFileError(f"{path}:{number}: invalid JSON: {exc.msg}") from None


def _yaml(path: Path, text: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """Compose the document first: its nodes know their lines, the plain objects do not."""
    import yaml

    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return
        if isinstance(root, yaml.MappingNode):
            devices = [v for k, v in root.value if getattr(k, "value", None) == "devices"]
            if not devices:
                raise MasterFileError(f"{path}:1: expected a list of devices or a devices: list")
            root = devices[0]
        if not isinstance(root, yaml.SequenceNode):
            raise MasterFileError(f"{path}:{root.start_mark.line + 1}: expected a list of devices")
        for node in root.value:
            yield node.start_mark.line + 1, loader.construct_object(node, deep=True)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 1
        raise MasterFileError(f"{path}:{line}: invalid YAML: {exc.problem or exc}") from None
    finally:
        loader.dispose()
