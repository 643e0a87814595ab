"""Media types as RFC 9110 8.3.1 says: case-insensitive essence, parameters aside."""

from __future__ import annotations

import pytest

from headwater.enricher.hop.media_type import MediaTypeError, parse
from headwater.enricher.hop.normalize import normalize_message
from tests.support.kafkatools import ACME, acme


@pytest.mark.parametrize(
    ("text", "essence", "params"),
    [
        ("application/json", "application/json", {}),
        ("Application/VND.Acme.Telemetry.v1+JSON", "application/vnd.acme.telemetry.v1+json", {}),
        ("text/csv;charset=UTF-8", "text/csv", {"charset": "UTF-8"}),
        (
            "text/csv ; Charset=utf-8 ; header=present",
            "text/csv",
            {"charset": "utf-8", "header": "present"},
        ),
        ('text/csv; charset="utf-8"', "text/csv", {"charset": "utf-8"}),
        ('a/b; x="semi;colon \\"q\\""', "a/b", {"x": 'semi;colon "q"'}),
        ("a/b;", "a/b", {}),  # an empty parameter is allowed by the grammar
        ("  a/b  ", "a/b", {}),
    ],
)
def test_parse(text: str, essence: str, params: dict[str, str]) -> None:
    m = parse(text)
    assert (m.essence, m.params) == (essence, params)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "expected type/subtype"),
        ("application", "expected type/subtype"),
        ("application/", "expected type/subtype"),
        ("application /json", "expected type/subtype"),
        ("app lication/json", "expected type/subtype"),
        ("application/json; charset", "malformed parameter 'charset'"),
        ("application/json; charset=", "malformed parameter"),
        ('application/json; x="open', "malformed parameter"),
        ("application/json; a=1; A=2", "parameter 'a' given twice"),
    ],
)
def test_malformed_media_types_say_why(text: str, why: str) -> None:
    with pytest.raises(MediaTypeError, match=why):
        parse(text)


def test_charset_is_case_insensitive() -> None:
    assert parse("text/csv; charset=UTF-8").charset == "utf-8"
    assert parse("text/csv").charset is None


@pytest.mark.parametrize(
    "content_type",
    [
        "APPLICATION/VND.ACME.TELEMETRY.V1+JSON",
        "application/vnd.acme.telemetry.v1+json; charset=utf-8",
        "application/vnd.acme.telemetry.v1+json;charset=UTF-8;profile=x",
    ],
)
def test_the_registry_matches_case_and_ignores_parameters(content_type: str) -> None:
    assert normalize_message(content_type, acme(21.5, 40.1)) == normalize_message(
        ACME, acme(21.5, 40.1)
    )


def test_a_malformed_content_type_is_its_own_dead_letter_reason() -> None:
    out = normalize_message("application json", b"{}")
    assert out["error_reason"] == "CONTENT_TYPE_INVALID"
    assert "is not a media type" in out["error_message"]
    out = normalize_message(f"{ACME}; charset", b"{}")
    assert (out["error_reason"], out["error_stage"]) == ("CONTENT_TYPE_INVALID", "normalize")
