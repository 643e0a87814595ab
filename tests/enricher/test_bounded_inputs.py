"""Inputs that reach C code or caches are bounded: unit spellings, media types, charsets.

Each test provokes what issue 22 found: an exponent tower pint would evaluate forever,
caches that re-raised one exception object (its traceback grew and pinned payloads), a
codec cache grown by unknown charset names, UTF-7's lone surrogates.
"""

from __future__ import annotations

import contextlib
import encodings
import gc
import time
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headwater.enricher.hop import media_type, units
from headwater.enricher.hop.normalize import normalize_message
from tests.support.kafkatools import GLOBEX

INITECH = "text/vnd.initech.telemetry.v1+csv"


def _globex(unit: str) -> bytes:
    return b'{"readings": [{"k": "length", "v": 1, "u": "%s"}]}' % unit.encode()


@pytest.mark.timeout(20)
@pytest.mark.parametrize(
    ("unit", "says"),
    [
        ("m**9**9**9", "stacked exponents"),
        ("m^9^9^9", "stacked exponents"),
        ("m ** 9 ** 9", "stacked exponents"),
        ("m**99", "exponent too large"),
        ("(m**9)**9", "not a unit spelling"),
        ("m**9.5", "not a unit spelling"),
        ("m*m*m*m*m*m*m", "not a unit spelling"),  # more factors than the grammar allows
        ("m3**2", "not a unit spelling"),  # "m3" is m**3 already: two exponents
        ("1e99 m", "not a unit spelling"),
        ("m" * 41, "longer than 40 characters"),
    ],
)
def test_spellings_outside_the_grammar_never_reach_pint(unit: str, says: str) -> None:
    units.warm()  # the registry's one-off build (~1 s on a loaded machine) is not the spelling's
    started = time.process_time()
    out = normalize_message(GLOBEX, _globex(unit))
    assert time.process_time() - started < 0.5
    assert out["error_reason"] == "UNIT_UNKNOWN"
    assert says in out["error_message"]


@pytest.mark.parametrize("unit", ["kg·m/s", "m**-1", "1/min", "m3/h", "kg m", "W*h", "m²/s"])
def test_the_grammar_still_lets_ordinary_spellings_through_to_pint(unit: str) -> None:
    assert units.GRAMMAR.fullmatch(unit)


def test_a_failed_spelling_is_cached_as_text_and_raised_as_a_new_error_each_time() -> None:
    errors = []
    for _ in range(3):
        with pytest.raises(units.UnitError) as caught:
            units.conversion("wobbles")
        errors.append(caught.value)
    assert units._CACHE["wobbles"] == "unknown unit 'wobbles'"
    assert len({id(e) for e in errors}) == 3
    # A fresh error's traceback holds this raise only, not every earlier one.
    assert all(len(_frames(e)) <= 2 for e in errors)


def _frames(exc: BaseException) -> list[object]:
    tb, out = exc.__traceback__, []
    while tb is not None:
        out.append(tb.tb_frame)
        tb = tb.tb_next
    return out


def test_an_error_text_too_long_to_format_is_a_unit_error_not_a_value_error() -> None:
    # A unit with an exponent past int's digit limit: formatting it raises ValueError.
    huge = units._ureg().parse_units("m") ** (10**4400)
    with pytest.raises(ValueError, match="4300"):
        str(huge)
    text = units._quantity_text("'m'", huge)
    assert text.startswith("unit 'm' is not a quantity with a canonical unit")


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="m°Ck/*^ ·23²-9()1.e", max_size=20))
def test_any_spelling_converts_or_is_a_unit_error(unit: str) -> None:
    # Anything but a UnitError (ValueError, OverflowError...) fails the test.
    with contextlib.suppress(units.UnitError):
        units.conversion(unit)


def test_engunit_of_sparkplug_takes_the_same_unit_path() -> None:
    started = time.process_time()
    out = normalize_message(
        "application/vnd.eclipse.sparkplug.b+protobuf; message-type=DBIRTH", _spb("m**9**9**9")
    )
    assert time.process_time() - started < 0.1
    (pending,) = out["pending"]
    assert pending["unit"] == "m**9**9**9"  # converted by the hop, resolved in the keyed state
    (unit,) = out["units"]
    assert unit["spelling"] == "m**9**9**9" and "stacked exponents" in unit["error"]


def _spb(unit: str) -> bytes:
    from headwater.proto.sparkplug.v1 import sparkplug_b_pb2 as spb

    p = spb.Payload(timestamp=1)
    m = p.metrics.add(name="length", datatype=10, double_value=1.0)
    m.properties.keys.append("engUnit")
    m.properties.values.add(type=12, string_value=unit)
    return p.SerializeToString()


def test_an_invalid_media_type_pins_no_payloads() -> None:
    # Before: one MediaTypeError object was cached and raised again for every message; each
    # raise added the frames of that call (holding its payload) to the same traceback.
    payload_size = 256 * 1024
    normalize_message("not a media type", b"x")  # cached, and warm
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(40):
            out = normalize_message("not a media type", bytes([i % 250]) * payload_size)
            assert out["error_reason"] == "CONTENT_TYPE_INVALID"
        del out
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 2 * payload_size, f"{grown} bytes still held after 40 payloads"
    assert isinstance(media_type._CACHE["not a media type"], str)


def test_a_content_type_longer_than_the_limit_is_refused_and_not_cached() -> None:
    text = "application/json; p=" + "x" * media_type.MAX_LEN
    out = normalize_message(text, b"{}")
    assert out["error_reason"] == "CONTENT_TYPE_INVALID"
    assert "longer than 512 characters" in out["error_message"]
    assert text not in media_type._CACHE


def test_unknown_charsets_do_not_grow_the_codec_cache() -> None:
    before = len(encodings._cache)
    for i in range(200):
        out = normalize_message(f"{INITECH}; charset=x-unknown-{i}", b"1,2,3")
        assert out["error_reason"] == "CHARSET_UNSUPPORTED"
    assert len(encodings._cache) == before


def test_utf7_is_refused_as_an_unsupported_charset() -> None:
    # "+2AA-" is UTF-7 for a lone surrogate U+D800: decoded, no encoder would take it.
    doc = b'{"readings": [{"k": "+2AA-", "v": 1, "u": "m"}]}'
    out = normalize_message(f"{GLOBEX}; charset=utf-7", doc)
    assert out["error_reason"] == "CHARSET_UNSUPPORTED"
    assert "unknown charset 'utf-7'" in out["error_message"]


@pytest.mark.parametrize(
    ("charset", "encoding"),
    [
        ("utf-8", "utf-8"),
        ("US-ASCII", "ascii"),
        ("ISO-8859-1", "latin-1"),
        ("utf-16", "utf-16"),
        ("utf-16be", "utf-16-be"),
        ("utf-32", "utf-32"),
        ("utf-32le", "utf-32-le"),
        ("windows-1252", "cp1252"),
    ],
)
def test_the_listed_charsets_are_honoured(charset: str, encoding: str) -> None:
    out = normalize_message(f"{INITECH}; charset={charset}", "294.65,0.401,3300\n".encode(encoding))
    assert [m["value"] for m in out["measurements"]] == [21.5, 40.1, 3.3]


def test_utf16_and_utf32_need_their_byte_order_mark() -> None:
    out = normalize_message(f"{INITECH}; charset=utf-16", "1,2,3".encode("utf-16-le"))
    assert (out["error_reason"], out["error_message"]) == (
        "PAYLOAD_UNDECODABLE",
        "not utf-16 text: no byte-order mark (or use utf-16le/be)",
    )


def test_a_json_escaped_surrogate_in_utf16_is_an_encode_dead_letter() -> None:
    # In UTF-16 the bytes of "\\u" are not b"\\u": the check must not depend on spotting them.
    doc = '{"readings": [{"k": "\\ud800", "v": 1, "u": "m"}]}'
    out = normalize_message(f"{GLOBEX}; charset=utf-16le", doc.encode("utf-16-le"))
    assert (out["error_stage"], out["error_reason"]) == ("encode", "UNENCODABLE_VALUE")
