"""The hop's fast paths give what the general code gives, on a varied corpus (issue 40).

The hop decodes an ingest record with ``decode.decode_ingest`` (not ``decode_for_key`` with a
header list), checks plain measurements in one loop (``normalize._checked_fast``, else the
full checks), measures ACME's float readings inline, parses JSON without ``decode_text``'s
lookups and ``JSONDecoder.decode``'s wrappers when it can (``formats.base.load_json``), makes
``Normalized`` without the frozen dataclass's generated ``__init__``, and builds its struct
array a column at a time (``arrow_hop.hop_struct``, not ``from_pylist`` of ``hop_rows``). Each
is compared here with the code it stands for, valid and invalid inputs alike: the same
columns, or the same error.
"""

from __future__ import annotations

import dataclasses
import inspect
import itertools
import math
from typing import Any

import pyarrow as pa
import pytest

from headwater import record_headers as rh
from headwater.enricher.hop import arrow_hop, normalize
from headwater.enricher.hop import budget as budgets
from headwater.enricher.hop.arrow_hop import HEADERS, _pairs
from headwater.enricher.hop.decode import decode_for_key, decode_ingest
from headwater.enricher.hop.formats import acme, base
from headwater.enricher.hop.formats.base import (
    Measurement,
    MetricDef,
    Normalized,
    NormalizeError,
    decode_text,
    load_json,
    measurer,
)
from headwater.enricher.hop.media_type import parse
from headwater.enricher.hop.timestamps import ms_of
from headwater.proto.device.v1 import device_message_pb2
from tests.enricher.corpus import corpus
from tests.enricher.hop_input import TOPICS
from tests.enricher.hop_input import columns as hop_columns
from tests.support.kafkatools import ACME, Msg, envelope, ingest_headers

TOPIC, MASTER = "ingest.telemetry.v1", "master.devices.v1"


def _envelope(device: str, **kw: Any) -> bytes:
    dm = device_message_pb2.DeviceMessage(
        message_id=kw.get("message_id", "m-1"),
        device_id=device,
        sequence=kw.get("sequence", 7),
        content_type=kw.get("content_type", "application/vnd.acme.telemetry.v1+json"),
        payload=b'{"temp_c": 21.5}',
    )
    dm.device_time.FromMilliseconds(kw.get("ms", 1_700_000_000_123))
    return dm.SerializeToString()


VALUES = [
    _envelope("dev-1"),
    _envelope("dev-2"),  # not the record's key
    _envelope("dev-1", message_id=""),
    _envelope("dev-1", content_type=""),
    _envelope("dev-1", sequence=2**64 - 1),
    _envelope("dev-1", ms=-1),
    b"\xff\xff not a protobuf",
    b"",
    None,
]
HEADER_VALUES = [
    (b"gw-1", b"h-1", b"1700000000999"),
    (None, None, None),
    (b"\xffgw", b"", b"12x"),
    (b"", b"m\xfe", b" 42 "),
    (None, b"m", b"-5"),
]


@pytest.mark.parametrize(("value", "headers"), list(itertools.product(VALUES, HEADER_VALUES)))
def test_decode_ingest_is_decode_for_key_without_the_header_map(
    value: bytes | None, headers: tuple[bytes | None, ...]
) -> None:
    assert HEADERS == (rh.GATEWAY_ID, rh.MESSAGE_ID, rh.RECEIVED_AT_MS)  # decode_ingest's order
    general = decode_for_key(TOPIC, "dev-1", value, _pairs(headers), MASTER)
    del general["header_map"]
    assert decode_ingest("dev-1", value, *headers) == general
    if general["device_id"]:  # decoded: the time is the envelope's, as ms_of gives it
        ts = device_message_pb2.DeviceMessage.FromString(value or b"").device_time
        assert general["device_time_ms"] == ms_of(ts)


READINGS: list[Any] = [
    [],
    [Measurement("t", 21.5, "celsius")],
    [Measurement("t", 21.5, "celsius", 1_700_000_000_000), Measurement("h", -0.0, "percent")],
    [Measurement("t", 21, "celsius")],  # an int: the full checks convert it
    [Measurement("t", True, "celsius")],
    [Measurement("t", math.nan, "celsius")],
    [Measurement("t", math.inf, "celsius")],
    [Measurement("", 1.0, "celsius")],
    [Measurement("x" * 2000, 1.0, "celsius")],
    [Measurement("t", 1.0, "u" * 2000)],
    [Measurement("t", 1.0, 5)],  # type: ignore[arg-type]
    [Measurement("t", 1.0, "celsius", 10**20)],
    [Measurement("t", 1.0, "celsius", 1.5)],  # type: ignore[arg-type]
    [Measurement("t", 1.0, "celsius", True)],  # type: ignore[arg-type]
    [("t", 1.0, "celsius")],  # a plugin's plain tuple
    [("t", 1.0, "celsius", 5)],
    [Measurement("t", 1.0, "celsius"), Measurement("u", "x", "celsius")],  # type: ignore[arg-type]
]


def _outcome(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception as exc:
        return (type(exc), str(exc))


@pytest.mark.parametrize("readings", READINGS)
def test_fast_measurement_checks_agree_with_the_full_ones(
    readings: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    n = Normalized("telemetry", "acme.telemetry.v1+json", readings)
    fast = _outcome(normalize.columns, n)
    monkeypatch.setattr(normalize, "_checked_fast", lambda ms, limit: None)
    assert fast == _outcome(normalize.columns, n)


ACME_PAYLOADS = [
    b'{"temp_c": 21.5, "hum_pct": 40.1}',
    b'{"temp_c": 70}',
    b'{"hum_pct": true}',
    b'{"temp_c": NaN}',
    b'{"temp_c": "x"}',
    b'{"temp_c": 1e400}',
    b'{"temp_c": 123456789012345678901234567890}',
    b'{"temp_c": -0.0, "other": 1}',
    b'{"temp_c": 1, "temp_c": 2}',
    b"[]",
    b"{}",
    b"not json",
]


def _acme_before(payloads: list[bytes], media: Any) -> list[Any]:
    """ACME telemetry as it was before the inline floats (every value through a measurer)."""
    fields = [(k, measurer(name, unit)) for k, name, unit in acme._FIELDS]
    out: list[Any] = []
    for payload in payloads:
        try:
            doc = load_json(payload, media)
            if not isinstance(doc, dict) or not {"temp_c", "hum_pct"} & doc.keys():
                raise NormalizeError(
                    "PAYLOAD_INVALID", "expected an object with temp_c and/or hum_pct"
                )
            values = [measured(doc[k]) for k, measured in fields if k in doc]
            out.append(Normalized("telemetry", "acme.telemetry.v1+json", values))
        except NormalizeError as exc:
            out.append(exc)
    return out


def test_acme_floats_measured_inline_are_what_the_measurer_gives() -> None:
    media = parse("application/vnd.acme.telemetry.v1+json")
    got = list(acme.acme_telemetry.batch(ACME_PAYLOADS, media))  # type: ignore[attr-defined]
    want = _acme_before(ACME_PAYLOADS, media)

    def key(r: Any) -> Any:
        return (type(r), r.reason, str(r)) if isinstance(r, NormalizeError) else r

    assert [key(r) for r in got] == [key(r) for r in want]
    assert sum(isinstance(r, Normalized) for r in got) >= 4


def test_normalized_init_is_the_one_dataclass_would_generate() -> None:
    # The reference: the same fields and defaults, with dataclass's generated __init__.
    reference = dataclasses.make_dataclass(
        "Reference",
        [(f.name, f.type, f) for f in dataclasses.fields(Normalized)],
        frozen=True,
    )
    names = [f.name for f in dataclasses.fields(Normalized)]
    assert list(inspect.signature(Normalized).parameters) == names
    ms = [Measurement("t", 1.0, "celsius")]
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
        (("telemetry", "x"), {}),
        (("telemetry", "x", ms), {}),
        (("alarm", "x", [], ("E1", 3, "hot")), {}),
        (("telemetry", "x", ms, None, [MetricDef(1, "m", "kPa", 10)], True, []), {}),
        (("telemetry", "x"), {"pending": [], "replaces_definitions": True}),
        (("telemetry", "x", None, None, None, None, None), {}),  # None kept, not a list
        ((), {"event_type": "e", "source_format": "s", "alarm": ("c", 1, "t")}),
    ]
    for args, kwargs in calls:
        got, want = Normalized(*args, **kwargs), reference(*args, **kwargs)
        assert vars(got) == vars(want), (args, kwargs)
        assert [type(getattr(got, n)) for n in names] == [type(getattr(want, n)) for n in names]
    a, b = Normalized("t", "x"), Normalized("t", "x")
    assert a == b and a.measurements is not b.measurements and a.pending is not b.pending
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.event_type = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        Normalized("t")  # type: ignore[call-arg]


JSON_PAYLOADS = [
    b'{"temp_c": 21.5, "hum_pct": 40.1}',
    b' {"a": 1}',
    b'{"a": 1}\n',
    b"\t[1, 2]\r\n",
    b'{"a": 1} {"b": 2}',
    b'{"a": 1}x',
    b"",
    b"   ",
    b"nope",
    b"{",
    b'{"a": 1, "a": 2}',
    b'{"a": {"b": 1, "b": 2}}',
    b'{"a": NaN, "b": -Infinity}',
    b'"text"',
    b"42",
    b"1" * 5000,  # over the int digit limit
    b'\xef\xbb\xbf{"bom": true}',
    b"\xef\xbb\xbf \xef\xbb\xbf{}",
    b"\xff\xfe not utf-8",
    b'{"s": "\\ud800"}',
    b"[" * 50 + b"]" * 50,
]
JSON_MEDIA = [
    "application/vnd.acme.telemetry.v1+json",
    "application/json; charset=utf-8",
    "application/json; charset=UTF8",
    "application/json; charset=iso-8859-1",
    "application/json; charset=utf-16",
    "application/json; charset=klingon",
]


@pytest.mark.parametrize("media", JSON_MEDIA)
def test_load_json_is_decode_text_then_the_decoder(media: str) -> None:
    m = parse(media)

    def general(payload: bytes) -> Any:
        text = decode_text(payload, m)
        try:
            return base._DECODER.decode(text)
        except NormalizeError:
            raise
        except (ValueError, RecursionError) as exc:
            raise NormalizeError("PAYLOAD_UNDECODABLE", f"not JSON: {exc}") from None

    def key(outcome: Any) -> Any:
        if isinstance(outcome, tuple) and outcome and outcome[0] is NormalizeError:
            return outcome
        return repr(outcome)  # NaN != NaN: compare what was parsed by its text

    for payload in JSON_PAYLOADS:
        got, want = _outcome_of(load_json, payload, m), _outcome_of(general, payload)
        assert key(got) == key(want), payload


def _outcome_of(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except NormalizeError as exc:
        return (NormalizeError, exc.reason, str(exc))


def _hop_records() -> list[Any]:
    """A varied batch of the hop's records: the enricher corpus, and a key that is not the
    envelope's device, a record whose decoding goes over its budget, masters."""
    rows = corpus(TOPICS.ingest, TOPICS.master)
    records = [
        (topic, (key or b"").decode("utf-8", "replace"), value, headers)
        for key, value, topic, *_, headers in rows
    ]
    m = Msg("k-1", "dev-a", ACME, b'{"temp_c": 1.5}')
    records.append((TOPICS.ingest[0], "dev-b", envelope(m), ingest_headers(m)))
    slow = Msg("slow-1", "dev-slow", ACME, b'{"temp_c": 2.5}')
    records.append((TOPICS.ingest[0], "dev-slow", envelope(slow), ingest_headers(slow)))
    records.append((TOPICS.master, "dev-x", b"\xff not a master", []))
    records.append((TOPICS.master, "dev-y", b"", []))
    return records


@pytest.fixture
def slow_decode(monkeypatch: pytest.MonkeyPatch) -> None:
    """Decoding ``dev-slow``'s record goes over its budget (as the timer would interrupt it)."""
    real = arrow_hop._decoding

    def decoding(records: Any, master_topic: str) -> Any:
        for r in records:
            if r[1] == "dev-slow":
                raise budgets.CpuBudgetExceeded()
            yield from real([r], master_topic)

    monkeypatch.setattr(arrow_hop, "_decoding", decoding)


def normalize_step_ran(row: dict[str, Any]) -> bool:
    return row["kind"] == "ingest" and row["error_stage"] != "decode"


@pytest.mark.spark
def test_hop_struct_is_hop_rows_as_arrow(spark: Any, slow_decode: None) -> None:
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    hop = StructType.fromDDL(arrow_hop.HOP)
    assert isinstance(hop, StructType)
    schema = to_arrow_schema(hop)
    records = _hop_records()
    decoded = arrow_hop.hop_rows(hop_columns(records), TOPICS.master)
    normalizable = [r for r, row in zip(records, decoded, strict=True) if normalize_step_ran(row)]
    batches = [
        records,  # every kind of row
        normalizable,  # every row normalized, some of them to a normalize error
        normalizable[:5],
        records[-2:],  # none normalized
        [],
    ]
    outcomes = set()
    for batch in batches:
        cols = hop_columns(batch)
        rows = arrow_hop.hop_rows(cols, TOPICS.master)
        want = pa.RecordBatch.from_pylist(rows, schema=schema).to_struct_array()
        got = arrow_hop.hop_struct(cols, TOPICS.master, schema)
        assert got.type == want.type
        assert got.to_pylist() == want.to_pylist()
        assert got.equals(want)
        outcomes |= {(r["error_stage"], r["error_reason"]) for r in rows}
    assert any(r["error_stage"] == "normalize" for r in decoded if normalize_step_ran(r))
    # The corpus reaches what the columns are built from: rows of both steps, errors of both.
    assert {("decode", budgets.CPU_REASON), ("decode", "ENVELOPE_INVALID")} <= outcomes
    assert {(None, None), ("normalize", "UNKNOWN_FORMAT"), ("normalize", "PAYLOAD_INVALID")} <= (
        outcomes
    )


@pytest.mark.parametrize(
    ("event_type", "source_format"),
    [("t", "s"), ("t" * 2000, "s"), ("t", "s" * 2000), ("t" * 2000, "s" * 3000), ("t", 5)],
)
def test_the_text_checks_of_event_type_and_source_format_raise_as_both_calls_did(
    event_type: str, source_format: Any
) -> None:
    def both_checked() -> Any:
        normalize._text(event_type, 1024)
        normalize._text(source_format, 1024)
        return "ok"

    n = Normalized(event_type, source_format, [Measurement("t", 1.0, "celsius")])
    got = _outcome(normalize.columns, n)
    assert (got if isinstance(got, tuple) else "ok") == _outcome(both_checked)
