"""Hypothesis strategies for payloads of every built-in format (the property and fuzz tests)."""

from __future__ import annotations

import json
import struct
from typing import Any

from hypothesis import strategies as st

from headwater.wire import length_field, varint, varint_field

numbers = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(10**400), max_value=10**400),
)
leaf = st.one_of(st.none(), st.booleans(), numbers, st.text(max_size=12))
json_values = st.recursive(
    leaf,
    lambda kids: (
        st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=10), kids, max_size=4)
    ),
    max_leaves=20,
)
# Names the built-in JSON formats look for, so generated documents reach deep code paths.
KEYS = [
    "temp_c",
    "hum_pct",
    "code",
    "readings",
    "k",
    "v",
    "u",
    "Messages",
    "Payload",
    "Type",
    "Body",
    "UaType",
    "Value",
    "Status",
    "StatusCode",
    "SourceTimestamp",
    "Timestamp",
    "MessageType",
    "severity",
    "text",
]
UNITS = ["C", "°F", "kPa", "psi", "mV", "%", "l/min", "wibbles", "", "m**99"]
shaped = st.recursive(
    st.one_of(leaf, st.sampled_from(UNITS), st.sampled_from(["ua-data", "ua-keyframe", "NaN"])),
    lambda kids: (
        st.lists(kids, max_size=4) | st.dictionaries(st.sampled_from(KEYS), kids, max_size=5)
    ),
    max_leaves=25,
)


def _json(doc: Any) -> bytes:
    # allow_nan: Python writes NaN/Infinity for non-finite floats, as sloppy devices do.
    return json.dumps(doc, allow_nan=True).encode()


@st.composite
def sparkplug(draw: st.DrawFn) -> bytes:
    metrics = []
    for _ in range(draw(st.integers(0, 4))):
        m = b""
        if draw(st.booleans()):
            m += length_field(1, draw(st.text(max_size=8)).encode())
        if draw(st.booleans()):
            m += varint_field(2, draw(st.integers(0, 2**64 - 1)))
        if draw(st.booleans()):
            m += varint_field(3, draw(st.integers(0, 2**64 - 1)))
        m += varint_field(4, draw(st.integers(0, 40)))
        if draw(st.booleans()):
            m += varint_field(7, 1)
        kind = draw(st.integers(0, 4))
        if kind == 0:
            m += varint_field(10, draw(st.integers(0, 2**32 - 1)))
        elif kind == 1:
            m += varint_field(11, draw(st.integers(0, 2**64 - 1)))
        elif kind == 2:
            m += varint(12 << 3 | 5) + struct.pack("<f", draw(st.floats(width=32)))
        elif kind == 3:
            m += varint(13 << 3 | 1) + struct.pack("<d", draw(st.floats()))
        if draw(st.booleans()):
            unit = draw(st.sampled_from(UNITS)).encode()
            prop = varint_field(1, 12) + length_field(8, unit)
            m += length_field(9, length_field(1, b"engUnit") + length_field(2, prop))
        metrics.append(length_field(2, m))
    return varint_field(1, draw(st.integers(0, 2**64 - 1))) + b"".join(metrics)


payloads = st.one_of(
    st.binary(max_size=300),
    json_values.map(_json),
    shaped.map(_json),
    sparkplug(),
    st.text(max_size=60).map(str.encode),
)
