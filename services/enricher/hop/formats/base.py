"""What every normalizer returns, the error it raises, and the decoding helpers it shares.

A normalizer is ``fn(payload: bytes, media: MediaType) -> Normalized``. It raises
:class:`NormalizeError` for bad data (the dead-letter reason goes with it); anything else it
raises is caught as ``NORMALIZER_FAILED``. It need not check that values are finite: the
registry's caller does that for every normalizer (``normalize.check``). It may carry a batch
form, ``fn.batch(payloads, media)`` (:func:`batch_normalizer`), which the enricher calls over
the messages of one media type in an Arrow batch.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from headwater.enricher.errors import EnricherError
from headwater.enricher.hop import units
from headwater.enricher.hop.media_type import MediaType


class NormalizeError(EnricherError, ValueError):
    """A payload that does not match its format; ``reason`` is the dead-letter reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class Measurement(NamedTuple):
    """One reading in its canonical unit; ``time_ms`` when the format times each reading."""

    name: str
    value: float
    unit: str
    time_ms: int | None = None


class MetricDef(NamedTuple):
    """A metric a Sparkplug B birth certificate defines: its alias (if any), unit, datatype."""

    alias: int | None
    name: str
    unit: str
    datatype: int


class Pending(NamedTuple):
    """A reading that needs the device's state to become a measurement (Sparkplug B).

    ``name`` is empty when the device sent only an ``alias``; ``unit`` is as sent (not yet
    converted), empty when the birth certificate gives it; ``datatype`` is 0 when unknown.
    """

    alias: int | None
    name: str
    value: float
    unit: str
    time_ms: int | None
    datatype: int


#: The default of a list field of :class:`Normalized` not given: a new empty list each time.
_NEW_LIST: Any = object()


@dataclass(frozen=True)
class Normalized:
    """The common-format content of one message."""

    event_type: str
    source_format: str
    measurements: list[Measurement] = field(default_factory=list)
    #: ``(code, severity 0..3, text)`` for alarm events.
    alarm: tuple[str, int, str] | None = None
    #: Metrics this message defines (a Sparkplug B birth certificate), kept in the device's
    #: state; ``replaces_definitions`` when they replace the earlier ones (a new birth).
    definitions: list[MetricDef] = field(default_factory=list)
    replaces_definitions: bool = False
    #: Readings resolved against the device's definitions in the keyed state.
    pending: list[Pending] = field(default_factory=list)

    def __init__(
        self,
        event_type: str,
        source_format: str,
        measurements: list[Measurement] = _NEW_LIST,
        alarm: tuple[str, int, str] | None = None,
        definitions: list[MetricDef] = _NEW_LIST,
        replaces_definitions: bool = False,
        pending: list[Pending] = _NEW_LIST,
    ) -> None:
        # The __init__ dataclass would generate, the same fields and defaults (a new list for
        # each list not given), written into the instance's dict at once: the generated one
        # of a frozen class sets each field through ``object.__setattr__`` (3.6 µs a call on
        # the hop's path here, this one 1.6: docs/benchmarks.md, issue 40). Assignment stays
        # refused (frozen). ``tests/enricher/test_hop_fast_paths.py`` checks the two agree.
        self.__dict__.update(
            event_type=event_type,
            source_format=source_format,
            measurements=[] if measurements is _NEW_LIST else measurements,
            alarm=alarm,
            definitions=[] if definitions is _NEW_LIST else definitions,
            replaces_definitions=replaces_definitions,
            pending=[] if pending is _NEW_LIST else pending,
        )


Normalizer = Callable[[bytes, MediaType], Normalized]
#: The batch form of a normalizer: the results of the payloads (all of one media type), in
#: order, one each, a :class:`NormalizeError` in place of a payload's result for bad data.
#: A generator, so that each message is timed on its own (``budget.each``).
BatchNormalizer = Callable[[Sequence[bytes], MediaType], Iterator[Normalized | NormalizeError]]


def batch_of(fn: Normalizer) -> BatchNormalizer:
    """Return the batch form of ``fn``: its own (``fn.batch``), else ``fn`` over each payload."""
    own = getattr(fn, "batch", None)
    if callable(own):
        return own  # type: ignore[no-any-return]

    def each(payloads: Sequence[bytes], media: MediaType) -> Iterator[Normalized | NormalizeError]:
        for payload in payloads:
            try:
                yield fn(payload, media)
            except NormalizeError as exc:  # data: this payload's result (others go on)
                yield exc

    return each


def batch_normalizer(batch: BatchNormalizer) -> Normalizer:
    """Make a normalizer from a batch form; the batch form stays on it as ``.batch``.

    For normalizers that do per-batch work once (a unit conversion looked up for the whole
    batch): the enricher calls the batch form, tools and tests may call one payload.
    """

    def one(payload: bytes, media: MediaType) -> Normalized:
        (result,) = batch([payload], media)
        if isinstance(result, NormalizeError):
            raise result
        return result

    functools.update_wrapper(one, batch)
    one.batch = batch  # type: ignore[attr-defined]
    return one


def check_value(name: Any, value: Any) -> float:
    """Return ``value`` as a finite float, or raise ``PAYLOAD_INVALID`` naming the field.

    The one place where the finiteness of every value is enforced, for every normalizer
    (built-in or plugin): ``normalize.normalize_message`` calls it on each measurement and
    pending reading, and alias resolution on each reading it resolves.
    """
    if not isinstance(name, str) or not name:
        raise NormalizeError("PAYLOAD_INVALID", f"a measurement has no name (value {value!r})")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise NormalizeError("PAYLOAD_INVALID", f"{name}: {value!r} is not a number")
    try:
        number = float(value)
    except OverflowError:
        raise NormalizeError("PAYLOAD_INVALID", f"{name}: {value} is out of range") from None
    if not math.isfinite(number):
        raise NormalizeError("PAYLOAD_INVALID", f"{name}: {number} is not a finite number")
    return number


#: The range of a protobuf Timestamp (years 1 to 9999) in ms since the epoch; a reading time
#: outside it could not be written into an event.
MIN_TIME_MS = -62_135_596_800_000
MAX_TIME_MS = 253_402_300_799_999


def check_time(name: str, time_ms: Any) -> int | None:
    """Return a reading's time in ms (or None), or raise ``PAYLOAD_INVALID`` naming the field."""
    if time_ms is None:
        return None
    if isinstance(time_ms, bool) or not isinstance(time_ms, int):
        raise NormalizeError("PAYLOAD_INVALID", f"{name}: time {time_ms!r} is not an integer")
    if not MIN_TIME_MS <= time_ms <= MAX_TIME_MS:
        raise NormalizeError("PAYLOAD_INVALID", f"{name}: time {time_ms} ms is out of range")
    return time_ms


def measure(name: str, value: Any, unit: str) -> Measurement:
    """Return the measurement ``name`` with ``value`` converted from ``unit`` to canonical.

    Raises:
        NormalizeError: ``PAYLOAD_INVALID`` when the value is not a number (the message names
            the field), ``UNIT_UNKNOWN`` when the unit cannot be converted (it names the unit).
    """
    number = _number(name, value)
    c = _conversion(name, unit)
    return Measurement(name, c.apply(number), c.canonical)


def measurer(name: str, unit: str) -> Callable[[Any], Measurement]:
    """Return ``measure`` of ``name`` in ``unit``, with the unit looked up once (for a batch).

    Raises:
        NormalizeError: ``UNIT_UNKNOWN`` now, when the unit cannot be converted.
    """
    c = _conversion(name, unit)
    return lambda value: Measurement(name, c.apply(_number(name, value)), c.canonical)


def _conversion(name: str, unit: str) -> units.Conversion:
    try:
        return units.conversion(unit)
    except units.UnitError as exc:
        raise NormalizeError("UNIT_UNKNOWN", f"{name}: {exc}") from None


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise NormalizeError("PAYLOAD_INVALID", f"{name}: {value!r} is not a number")
    try:
        return float(value)
    except OverflowError:  # an integer literal beyond a double
        raise NormalizeError("PAYLOAD_INVALID", f"{name}: {value} is out of range") from None


#: The charsets a payload may declare (lower case) -> Python's codec. A fixed list: looking
#: a device's name up in the codec registry would grow the registry's cache with every new
#: name, and some codecs the registry knows do harm (UTF-7 decodes to lone surrogates).
CHARSETS: dict[str, str] = {
    "utf-8": "utf-8",
    "utf8": "utf-8",
    "us-ascii": "ascii",
    "ascii": "ascii",
    "iso-8859-1": "latin-1",
    "iso_8859-1": "latin-1",
    "latin1": "latin-1",
    "latin-1": "latin-1",
    "l1": "latin-1",
    "windows-1252": "cp1252",
    "cp1252": "cp1252",
    "utf-16": "utf-16",  # a byte-order mark is required (below)
    "utf-16le": "utf-16-le",
    "utf-16be": "utf-16-be",
    "utf-32": "utf-32",  # a byte-order mark is required (below)
    "utf-32le": "utf-32-le",
    "utf-32be": "utf-32-be",
}
#: A charset outside :data:`CHARSETS`.
CHARSET_REASON = "CHARSET_UNSUPPORTED"
_BOMS = {
    "utf-16": (b"\xff\xfe", b"\xfe\xff"),
    "utf-32": (b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff"),
}


def decode_text(payload: bytes, media: MediaType, default: str = "utf-8") -> str:
    """Return ``payload`` as text in the media type's ``charset`` (else ``default``).

    The charset must be one of :data:`CHARSETS`. ``utf-16`` and ``utf-32`` need their
    byte-order mark (without one, the byte order is a guess); a UTF-8 byte-order mark is
    dropped (RFC 8259 section 8.1 lets parsers ignore it, and spreadsheet exports of CSV
    write one).

    Raises:
        NormalizeError: ``CHARSET_UNSUPPORTED`` for a charset not in the list,
            ``PAYLOAD_UNDECODABLE`` for bytes that are not text in it.
    """
    charset = media.charset or default
    codec = CHARSETS.get(charset)
    if codec is None:
        raise NormalizeError(
            CHARSET_REASON,
            f"unknown charset {charset[:40]!r} (supported: utf-8, us-ascii, iso-8859-1, "
            "windows-1252, utf-16 and utf-32 with a byte-order mark, utf-16le/be, utf-32le/be)",
        )
    if codec in _BOMS and not payload.startswith(_BOMS[codec]):
        raise NormalizeError(
            "PAYLOAD_UNDECODABLE", f"not {charset} text: no byte-order mark (or use {charset}le/be)"
        )
    try:
        text = payload.decode(codec)
    except UnicodeDecodeError as exc:
        raise NormalizeError("PAYLOAD_UNDECODABLE", f"not {charset} text: {exc}") from None
    # Only UTF-8's mark is dropped here; UTF-16 and UTF-32 codecs consume their own.
    return text[1:] if codec == "utf-8" and text.startswith("\ufeff") else text


def _unique_names(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # RFC 8259 4: names SHOULD be unique and behaviour with duplicates is unpredictable; one
    # component reading the first and another the last is how a checked value gets swapped.
    doc = dict(pairs)
    if len(doc) != len(pairs):
        seen: set[str] = set()
        for name, _ in pairs:
            if name in seen:
                raise NormalizeError(
                    "PAYLOAD_UNDECODABLE", f"duplicate name {name!r} in a JSON object"
                )
            seen.add(name)
    return doc


#: One decoder for every call: ``json.loads`` with a hook builds a new one each time.
_DECODER = json.JSONDecoder(object_pairs_hook=_unique_names)
#: Its scanner (C), which ``JSONDecoder.__init__`` sets and typeshed does not declare.
_SCAN: Callable[[str, int], tuple[Any, int]] = _DECODER.scan_once  # type: ignore[attr-defined]
_JSON_SPACE = " \t\n\r"


def _decode(text: str) -> Any:
    """Return ``_DECODER.decode(text)``: for a document with no whitespace around it, its scan.

    ``JSONDecoder.decode`` is two Python calls and two whitespace regexes around the C
    scanner; a payload that starts with a value and ends where the value ends needs neither.
    Anything else (whitespace around, extra data, not a value) goes to ``decode`` itself,
    which gives the same value or raises its own error (the scan again: the same document).
    The scan runs two frames less deep than under ``decode``: a document nested to within
    two levels of the recursion limit may parse here where it did not (how deep it may go
    depended on the caller's stack before, too).
    """
    if text and text[0] not in _JSON_SPACE:
        try:
            obj, end = _SCAN(text, 0)
        except StopIteration:
            pass  # not a value: ``decode`` raises "Expecting value" for it
        else:
            if end == len(text):
                return obj
    return _DECODER.decode(text)


def load_json(payload: bytes, media: MediaType) -> Any:
    """Parse a JSON payload (RFC 8259): UTF-8, BOM tolerated, duplicate names rejected.

    ``NaN`` and ``Infinity`` are not JSON but are read, so that the finiteness check names
    the field in its ``PAYLOAD_INVALID`` dead letter instead of a parse error.

    Raises:
        NormalizeError: ``PAYLOAD_UNDECODABLE`` when the payload is not JSON text.
    """
    if media.charset is None:  # the common case: decode_text's UTF-8, without its lookups
        try:
            text = payload.decode()
        except UnicodeDecodeError:
            text = decode_text(payload, media)  # raises its PAYLOAD_UNDECODABLE
        if text.startswith("\ufeff"):
            text = text[1:]
    else:
        text = decode_text(payload, media)
    try:
        return _decode(text)
    except NormalizeError:
        raise
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, int digit limit, nesting
        raise NormalizeError("PAYLOAD_UNDECODABLE", f"not JSON: {exc}") from None
