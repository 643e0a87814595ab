"""Property: for any bytes, every registered normalizer ends in columns or a reason, never a raise.

And what it emits is clean: every value finite, every measurement named, every time in
range. ``NORMALIZER_FAILED`` (an exception other than NormalizeError) counts as a bug here.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from headwater.enricher.hop.formats import REGISTRY
from headwater.enricher.hop.normalize import normalize_message
from tests.support.strategies import payloads

FORMATS = sorted(REGISTRY)
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

PARAMS = [
    "",
    "; charset=utf-8",
    "; charset=UTF-16",
    "; message-type=DBIRTH",
    "; message-type=DDATA",
]


def _assert_clean(measurements: list[dict[str, Any]]) -> None:
    for m in measurements:
        assert isinstance(m["name"], str) and m["name"]
        assert isinstance(m["value"], float) and math.isfinite(m["value"])
        assert isinstance(m["unit"], str)
        assert m["time_ms"] is None or -(2**62) < m["time_ms"] < 2**62


@pytest.mark.parametrize("content_type", FORMATS)
@SETTINGS
@given(payload=payloads, params=st.sampled_from(PARAMS))
def test_any_bytes_end_in_clean_columns_or_a_reason(
    content_type: str, payload: bytes, params: str
) -> None:
    out = normalize_message(content_type + params, payload)
    if out.get("error_reason"):
        assert out["error_reason"] != "NORMALIZER_FAILED", out["error_message"]
        assert out["error_stage"] == "normalize" and out["error_message"]
        return
    _assert_clean(out["measurements"])
    for p in out.get("pending") or []:
        assert math.isfinite(p["value"]) and (p["name"] or p["alias"] is not None)
    # What the JVM operator resolves readings with: each unit's conversion, finite, or why not.
    for u in out.get("units") or []:
        assert u["error"] or (math.isfinite(u["scale"]) and math.isfinite(u["offset"])), u


def test_the_property_covers_every_registered_format() -> None:
    assert {
        "application/vnd.acme.telemetry.v1+json",
        "application/vnd.globex.telemetry.v2+json",
        "text/vnd.initech.telemetry.v1+csv",
        "application/vnd.acme.alarm.v1+json",
        "application/vnd.eclipse.sparkplug.b+protobuf",
        "application/vnd.opcfoundation.uapubsub+json",
    } <= set(FORMATS)
