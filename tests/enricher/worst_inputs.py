"""Builders of the worst inputs per format (issue 35), at the size that was tried and larger.

Each builder takes a ``scale`` (1: the size issue 35 tried, with ingest's 256 KiB payload limit
in mind; 10: ten times it) and returns ``(content type, payload)``: generated when a test runs,
never stored as files. At scale 1 every payload is within ingest's 256 KiB; at 10 most are
over it (the enricher must refuse them too: the topic may hold records from other producers).
``test_worst_inputs.py`` runs them through the Python hop.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from headwater_dev.bench.enricher.units import distinct_units_birth
from tests.support.kafkatools import ACME, GLOBEX, INITECH
from tests.support.payloads import DBIRTH, DDATA, OPCUA, opcua_network
from tests.support.payloads import sparkplug_metric as metric
from tests.support.payloads import sparkplug_payload as payload_of

Builder = Callable[[int], tuple[str, bytes]]

#: Every control, invisible and bidirectional character kind a name may carry: C0, DEL, C1,
#: the bidi overrides and isolates, line/paragraph separators, zero-width and tag characters.
CONTROLS = (
    "".join(map(chr, range(0x20)))
    + "\x7f\x85\x9f\u061c\u200b\u200e\u202a\u202e\u2028\u2029\u2060\u2066\u2069\ufeff\U000e0041"
)
#: Numbers no reading may become: non-finite, past a double's range, 5,000 digits.
OUT_OF_RANGE = ("NaN", "Infinity", "-Infinity", "1e400", "-1e400", "9" * 5_000)
#: Every number tried: the out-of-range ones and a 5,000-digit fraction that underflows to 0.0.
NUMBERS = (*OUT_OF_RANGE, "0." + "0" * 4_998 + "1")


def deep_json(fmt: str) -> Builder:
    """JSON nested 10,000 deep (per scale) in a document of ``fmt``."""
    return lambda scale: (fmt, b'{"a":' * 10_000 * scale + b"1" + b"}" * 10_000 * scale)


def deep_arrays(scale: int) -> tuple[str, bytes]:
    """A Globex document whose reading value is an array nested 10,000 deep (per scale)."""
    depth = 10_000 * scale
    return GLOBEX, b'{"readings": [{"k": "t", "v": ' + b"[" * depth + b"]" * depth + b"}]}"


def huge_metric_name(scale: int) -> tuple[str, bytes]:
    """A Sparkplug B DBIRTH with one metric whose name is 200 KB (per scale)."""
    name = "n" * 200_000 * scale
    return DBIRTH, payload_of(metric(name, alias=1, datatype=10, double_value=1.0))


def alias_only_metrics(scale: int) -> tuple[str, bytes]:
    """A Sparkplug B DDATA of 40,000 (per scale) metrics that name only an alias."""
    return DDATA, payload_of(*(metric(alias=i) for i in range(40_000 * scale)))


def distinct_units(scale: int) -> tuple[str, bytes]:
    """A DBIRTH of 4,500 (per scale) metrics, each with a different valid compound unit."""
    return DBIRTH, distinct_units_birth(4_500 * scale, salt=3)


def numbers(fmt: str, number: str) -> Builder:
    """``number`` (of :data:`NUMBERS`, its digits times scale) in every numeric slot of ``fmt``."""

    def build(scale: int) -> tuple[str, bytes]:
        v = number if len(number) < 100 else number * scale
        if fmt == ACME:
            return fmt, f'{{"temp_c": {v}, "hum_pct": {v}}}'.encode()
        if fmt == GLOBEX:
            return fmt, f'{{"readings": [{{"k": "t", "v": {v}, "u": "degC"}}]}}'.encode()
        if fmt == INITECH:
            return fmt, f"{v},{v},{v}\n".encode()
        message = f'{{"DataSetWriterId": 1, "Payload": {{"f": {{"Value": {v}}}, "g": {v}}}}}'
        return fmt, f'{{"MessageType": "ua-data", "Messages": [{message}]}}'.encode()

    return build


def sparkplug_numbers(scale: int) -> tuple[str, bytes]:
    """A DBIRTH whose double, float and integer metrics hold NaN, infinities and extremes."""
    inf, nan = float("inf"), float("nan")
    metrics = [
        metric(f"d{i}", alias=i, datatype=10, double_value=v)
        for i, v in enumerate([nan, inf, -inf, 1.7976931348623157e308] * scale)
    ]
    metrics.append(metric("f", alias=900, datatype=9, float_value=nan))
    metrics.append(metric("u", alias=901, datatype=8, long_value=2**64 - 1))
    return DBIRTH, payload_of(*metrics)


def wide_csv(scale: int) -> tuple[str, bytes]:
    """An Initech CSV line of 100,000 (per scale) columns."""
    return INITECH, ",".join(["1"] * 100_000 * scale).encode() + b"\n"


def control_names(fmt: str) -> Builder:
    """Names made of :data:`CONTROLS` (100 per scale) in ``fmt``'s named fields."""

    def build(scale: int) -> tuple[str, bytes]:
        names = [f"{CONTROLS}{i}" for i in range(100 * scale)]
        if fmt == GLOBEX:
            doc = {"readings": [{"k": n, "v": 1, "u": "degC"} for n in names]}
            return fmt, json.dumps(doc).encode()
        if fmt == ACME:
            return fmt, json.dumps({n: 1 for n in names} | {"temp_c": 21.5}).encode()
        if fmt == OPCUA:
            msg = {"DataSetWriterId": 1, "Payload": {n: {"Value": 1} for n in names}}
            return fmt, opcua_network(msg)
        return DBIRTH, payload_of(
            *(metric(n, alias=i, datatype=10, double_value=1.0) for i, n in enumerate(names))
        )

    return build


def long_unit(scale: int) -> tuple[str, bytes]:
    """A Globex reading whose unit is 200 KB (per scale) of hex."""
    unit = "ab12" * 50_000 * scale
    return GLOBEX, json.dumps({"readings": [{"k": "t", "v": 1, "u": unit}]}).encode()


def unknown_charset(scale: int) -> tuple[str, bytes]:
    """An Initech line in a charset no codec knows (a new name per scale)."""
    return f"{INITECH}; charset=x-worst-{scale}", b"1,2,3\n"


#: The corpus: name -> builder.
WORST: dict[str, Builder] = {
    "deep json acme": deep_json(ACME),
    "deep json globex": deep_json(GLOBEX),
    "deep json opcua": deep_json(OPCUA),
    "deep arrays globex": deep_arrays,
    "sparkplug huge metric name": huge_metric_name,
    "sparkplug alias-only metrics": alias_only_metrics,
    "sparkplug distinct units": distinct_units,
    "sparkplug non-finite numbers": sparkplug_numbers,
    **{
        f"number {n[:12]} {name}": numbers(fmt, n)
        for name, fmt in [
            ("acme", ACME),
            ("globex", GLOBEX),
            ("initech", INITECH),
            ("opcua", OPCUA),
        ]
        for n in NUMBERS
    },
    "wide csv": wide_csv,
    "control names globex": control_names(GLOBEX),
    "control names acme": control_names(ACME),
    "control names opcua": control_names(OPCUA),
    "control names sparkplug": control_names(DBIRTH),
    "long unit": long_unit,
    "unknown charset": unknown_charset,
}
