"""Poison-proof steps, as pure units, and a property test over what ingest accepts.

The property test runs every message ingest's validation accepts through the Python hop
(decode, normalize, unit conversions) and its Arrow encoding: none may raise. What the JVM
operator does with the hop's rows is tested by its JUnit tests and the guarantee tests.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from headwater.enricher.hop.arrow_hop import HEADERS, HOP, hop_rows
from headwater.enricher.hop.arrowsafe import sanitize
from headwater.enricher.hop.decode import decode_record
from headwater.enricher.hop.normalize import normalize_message
from headwater.enricher.topics import EnricherTopics
from headwater.ingest.write.validation import DeviceMessageValidator
from headwater.proto.device.v1 import device_message_pb2
from tests.support.kafkatools import ACME, ALARM, GLOBEX, INITECH, Msg, envelope, ingest_headers

T = EnricherTopics.with_prefix("u.")
VALIDATOR = DeviceMessageValidator(262144)


def _decode(value: bytes, mid: str = "m1") -> dict[str, Any]:
    headers = [{"key": k, "value": v} for k, v in ingest_headers(Msg(mid, "d", ACME, b""))]
    return decode_record(T.ingest[0], b"d", value, headers, T.master)


def _envelope(**kw: Any) -> device_message_pb2.DeviceMessage:
    dm = device_message_pb2.DeviceMessage.FromString(envelope(Msg("m1", "d", ACME, b"{}")))
    if "nanos" in kw:
        dm.device_time.nanos = kw["nanos"]
    if "seconds" in kw:
        dm.device_time.seconds = kw["seconds"]
    if "sequence" in kw:
        dm.sequence = kw["sequence"]
    return dm


@pytest.mark.parametrize(
    ("fields", "bad"),
    [
        ({"nanos": -1}, "device_time.nanos"),
        ({"nanos": 1_000_000_000}, "device_time.nanos"),
        ({"seconds": -1}, "device_time"),
        ({"seconds": 253402300800}, "device_time"),
        ({"sequence": 2**63}, "sequence"),
        ({"sequence": 2**64 - 1}, "sequence"),
    ],
)
def test_ingest_refuses_what_the_enricher_cannot_hold(fields: dict[str, int], bad: str) -> None:
    assert [f for f, _ in VALIDATOR.violations(_envelope(**fields))] == [bad]


def test_ingest_accepts_the_edges_of_the_ranges() -> None:
    assert VALIDATOR.violations(_envelope(sequence=2**63 - 1, nanos=999_999_999)) == []
    assert VALIDATOR.violations(_envelope(seconds=253402300799, nanos=0)) == []


@pytest.mark.parametrize("fields", [{"nanos": -1}, {"sequence": 2**64 - 1}])
def test_decode_dead_letters_envelopes_it_cannot_convert(fields: dict[str, int]) -> None:
    out = _decode(_envelope(**fields).SerializeToString())
    assert (out["error_stage"], out["error_reason"]) == ("decode", "ENVELOPE_INVALID")
    assert out["message_id"] == "m1"  # still named, from the header


@pytest.mark.parametrize(
    ("content_type", "payload"),
    [
        (GLOBEX, b'{"readings": [{"k": "\\ud800", "v": 1, "u": "C"}]}'),
        (ALARM, b'{"code": "E1", "text": "\\udfff"}'),
        (ALARM, b'{"code": "\\ud800"}'),
    ],
)
def test_lone_surrogates_are_an_encode_error_not_an_exception(
    content_type: str, payload: bytes
) -> None:
    out = normalize_message(content_type, payload)
    assert (out["error_stage"], out["error_reason"]) == ("encode", "UNENCODABLE_VALUE")


def test_error_texts_that_quote_bad_input_are_sanitized() -> None:
    # An exception text may quote a lone surrogate, which Arrow and protobuf refuse to
    # encode: the dead letter of that message would then fail the task instead. Decode and
    # normalize put every exception text through sanitize.
    text = sanitize(str(ValueError("bad key '\ud800'")))
    text.encode("utf-8")  # raises if a surrogate survived
    assert text.startswith("bad key '")
    out = _decode(b"\x0a\xff")
    assert out["error_reason"] == "ENVELOPE_UNDECODABLE"
    out["error_message"].encode("utf-8")


# --- property: whatever ingest accepts, the steps never raise -------------------------

_text = st.text(max_size=40)
_json_value = st.recursive(
    st.none() | st.booleans() | st.floats() | st.integers() | _text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text, inner, max_size=4),
    max_leaves=12,
)
_reading = st.fixed_dictionaries(
    {
        "k": _text,
        "v": st.floats() | st.integers() | _text,
        "u": st.sampled_from(["C", "F", "%", "x"]),
    }
)
_payloads = st.one_of(
    st.binary(max_size=200),
    _json_value.map(lambda v: json.dumps(v).encode()),
    st.lists(_reading, max_size=5).map(lambda r: json.dumps({"readings": r}).encode()),
    st.fixed_dictionaries({"temp_c": _json_value, "hum_pct": _json_value}).map(
        lambda d: json.dumps(d).encode()
    ),
    st.fixed_dictionaries({"code": _text, "text": _json_value, "severity": _text}).map(
        lambda d: json.dumps(d).encode()
    ),
    # Lone surrogates as JSON escapes, which json.dumps of a Python str never writes.
    st.sampled_from(
        [b'{"readings": [{"k": "\\ud800", "v": 1, "u": "C"}]}', b'{"code": "\\udc00"}']
    ),
)
_ids = st.from_regex(r"[A-Za-z0-9._:-]{1,64}", fullmatch=True)


@st.composite
def device_messages(draw: Any) -> device_message_pb2.DeviceMessage:
    dm = device_message_pb2.DeviceMessage(
        message_id=draw(_ids),
        device_id=draw(_ids),
        sequence=draw(st.integers(0, 2**64 - 1)),
        content_type=draw(st.sampled_from([ACME, GLOBEX, INITECH, ALARM, "text/x-other"])),
        payload=draw(_payloads),
    )
    dm.device_time.seconds = draw(st.integers(-(2**40), 2**40))
    dm.device_time.nanos = draw(st.integers(-(2**31), 2**31 - 1))
    return dm


def _hop_schema() -> pa.Schema:
    # ``HOP`` as Spark's Arrow conversion types it (PySpark parses DDL in the JVM).
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    hop = StructType.fromDDL(HOP)
    assert isinstance(hop, StructType)
    return to_arrow_schema(hop)


@pytest.mark.spark
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(device_messages())
def test_any_message_ingest_accepts_goes_through_every_step(
    spark: Any, dm: device_message_pb2.DeviceMessage
) -> None:
    if VALIDATOR.violations(dm):
        return  # ingest refuses it: never written
    found = dict(ingest_headers(Msg(dm.message_id, "d", ACME, b"")))  # as Spark SQL picks them
    value = dm.SerializeToString()
    columns = [pa.array([T.ingest[0]]), pa.array([dm.device_id]), pa.array([value])]
    columns += [pa.array([found.get(h)], pa.binary()) for h in HEADERS]
    (row,) = hop_rows(columns, T.master)  # decode and normalize, as in the hop
    assert row["error_stage"] != "decode", row  # ingest-valid envelopes always decode
    pa.RecordBatch.from_pylist([row], schema=_hop_schema()).to_struct_array()
