"""Initech's CSV telemetry v1: one line of three numbers."""

from __future__ import annotations

import csv
from collections.abc import Iterator, Sequence
from typing import Any

from headwater.enricher.hop.formats.base import (
    Normalized,
    NormalizeError,
    batch_normalizer,
    decode_text,
    measurer,
)
from headwater.enricher.hop.formats.registry import register
from headwater.enricher.hop.media_type import MediaType

#: The columns in order: (measurement name, unit).
_COLUMNS = (("temperature", "K"), ("humidity", "ratio"), ("voltage", "mV"))
#: Longest line read: three numbers fit many times over; longer is not this format (and the
#: csv module refuses cells over 128 Ki characters with its own error).
MAX_LINE = 1024


@register("text/vnd.initech.telemetry.v1+csv")
@batch_normalizer
def initech_telemetry(
    payloads: Sequence[bytes], media: MediaType
) -> Iterator[Normalized | NormalizeError]:
    """Initech v1: ``temperature_k,humidity_ratio,voltage_mv`` (RFC 4180 line, CRLF or LF).

    The ``charset`` parameter is honoured (default UTF-8, of which ASCII is a part); a
    byte-order mark, a trailing line end and spaces around cells are tolerated.
    """
    columns = [(name, measurer(name, unit)) for name, unit in _COLUMNS]  # units: once a batch
    for payload in payloads:
        try:
            yield Normalized(
                "telemetry", "initech.telemetry.v1+csv", _line(payload, media, columns)
            )
        except NormalizeError as exc:
            yield exc


def _line(payload: bytes, media: MediaType, columns: list[tuple[str, Any]]) -> list[Any]:
    text = decode_text(payload, media)
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) != 1:
        raise NormalizeError("PAYLOAD_INVALID", f"expected one CSV line, got {len(lines)}")
    if len(lines[0]) > MAX_LINE:
        raise NormalizeError(
            "PAYLOAD_INVALID", f"a line of {len(lines[0])} characters; expected three numbers"
        )
    try:
        cells = next(csv.reader(lines))
    except csv.Error as exc:  # an unterminated quote, a NUL...
        raise NormalizeError("PAYLOAD_INVALID", f"not a CSV line: {exc}") from None
    if len(cells) != len(columns):
        raise NormalizeError("PAYLOAD_INVALID", f"expected 3 columns, got {len(cells)}")
    values = []
    for (name, measured), cell in zip(columns, cells, strict=True):
        try:
            number = float(cell.strip())
        except ValueError:
            raise NormalizeError(
                "PAYLOAD_UNDECODABLE", f"{name}: {cell.strip()!r} is not a number"
            ) from None
        values.append(measured(number))
    return values
