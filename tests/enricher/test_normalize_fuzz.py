"""Fuzz check (issue 22): every generated payload ends in a result or a reason, within budget.

Property-based generation of payloads for every built-in format and of every media-type
parameter the formats read (``charset``, ``message-type``) plus arbitrary ones. Each case
must end, within the normalize budget's CPU time, in normalized columns or a dead-letter
reason, and the process's resident memory must not grow over the run (what a cache of
exception objects or an unbounded codec cache would do).

The default run is small (``FUZZ_SMOKE_CASES`` per format). The full check, 10,000 cases
per format, is a marked test run on demand (figures in docs/benchmarks.md)::

    .venv/bin/pytest -m fuzz tests/enricher/test_normalize_fuzz.py

The worst inputs found by hand (issue 35) are a fixed corpus beside it, run through the whole
Python hop: ``worst_inputs.py``, ``test_worst_inputs.py``.
"""

from __future__ import annotations

import gc
import json
import os
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from headwater.enricher.hop import budget as budgets
from headwater.enricher.hop.normalize import normalize_message
from tests.support.strategies import payloads, sparkplug

BUILT_IN = [
    "application/vnd.acme.telemetry.v1+json",
    "application/vnd.acme.alarm.v1+json",
    "application/vnd.globex.telemetry.v2+json",
    "text/vnd.initech.telemetry.v1+csv",
    "application/vnd.eclipse.sparkplug.b+protobuf",
    "application/vnd.opcfoundation.uapubsub+json",
]
FUZZ_SMOKE_CASES = 150
FUZZ_FULL_CASES = int(os.environ.get("HEADWATER_FUZZ_CASES", "10000"))
#: Allowed growth of resident memory between the first tenth of a run and its end. The
#: defects this guards against grew by megabytes per hundred messages.
RSS_SLACK_BYTES = 4 * 1024 * 1024

# Unit spellings a hostile or sloppy device might send: towers, huge exponents, grammar
# edges, and text drawn from the characters the grammar uses.
HOSTILE_UNITS = [
    "m**9**9**9",
    "m^9^9^9",
    "m**99999",
    "(m**9)**9",
    "1e308 m",
    "m" * 41,
    "°C",
    "kPa",
    "m3/h",
    "kg·m/s",
    "delta_degC",
]
units_text = st.one_of(
    st.sampled_from(HOSTILE_UNITS), st.text(alphabet="m°Ck/*^ ·23²-9()1.e_%", max_size=24)
)
CHARSETS = [
    "utf-8",
    "UTF-8",
    "us-ascii",
    "iso-8859-1",
    "latin1",
    "windows-1252",
    "utf-16",
    "utf-16le",
    "utf-16be",
    "utf-32",
    "utf-32be",
    "utf-7",
    "klingon",
    "",
]
token = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-._", min_size=1, max_size=12)
param = st.one_of(
    # Malformed parameters a fleet repeats: the same invalid content type again and again.
    st.sampled_from(["; charset", "; a=b; a=c", '; x="open']),
    st.sampled_from(CHARSETS).map(lambda c: f"; charset={c}"),
    token.map(lambda c: f"; charset={c}"),
    st.sampled_from(["DBIRTH", "NBIRTH", "DDATA", "NDATA", "DDEATH", "bogus"]).map(
        lambda m: f"; message-type={m}"
    ),
    st.tuples(token, token).map(lambda kv: f"; {kv[0]}={kv[1]}"),
    st.tuples(token, st.text(max_size=12)).map(lambda kv: f"; {kv[0]}={json.dumps(kv[1])}"),
    st.text(max_size=16).map(lambda s: "; " + s),
)
# Half the cases without parameters, so that most payloads reach their normalizer.
params = st.one_of(st.just(""), st.lists(param, min_size=1, max_size=3).map("".join))


def _globex(readings: list[tuple[str, Any, str]]) -> bytes:
    return json.dumps({"readings": [{"k": k, "v": v, "u": u} for k, v, u in readings]}).encode()


globex_docs = st.lists(
    st.tuples(st.text(max_size=10), st.one_of(st.floats(), st.integers()), units_text),
    min_size=1,
    max_size=5,
).map(_globex)


@st.composite
def sparkplug_with_units(draw: st.DrawFn) -> bytes:
    from headwater.proto.sparkplug.v1 import sparkplug_b_pb2 as spb

    p = spb.Payload(timestamp=draw(st.integers(0, 2**40)))
    for i in range(draw(st.integers(0, 5))):
        m = p.metrics.add(name=draw(st.text(max_size=20)) or f"m{i}", datatype=10)
        m.double_value = draw(st.floats())
        m.properties.keys.append(draw(st.sampled_from(["engUnit", "engUnits", "unit"])))
        m.properties.values.add(type=12, string_value=draw(units_text))
    return p.SerializeToString()


numbers = st.one_of(st.floats(), st.integers(-(10**20), 10**20))
acme_docs = st.dictionaries(
    st.sampled_from(["temp_c", "hum_pct", "code", "severity", "text"]),
    st.one_of(numbers, st.text(max_size=8)),
    min_size=1,
).map(lambda d: json.dumps(d).encode())
csv_lines = st.lists(numbers.map(str), min_size=2, max_size=4).map(
    lambda cells: (",".join(cells) + "\r\n").encode()
)


def _encoded(doc: bytes, charset_of: str) -> bytes:
    return doc.decode().encode(charset_of) if charset_of else doc


class Big(int):
    """A payload of this many bytes, made when the case runs: a new object each time, so
    whatever pins payloads shows in the resident memory (and the case list stays small)."""


cases = st.one_of(
    # Up to 300 KiB: past the payload budget (256 KiB) too.
    st.integers(32, 300).map(lambda k: Big(k * 1024)),
    payloads,
    acme_docs,
    csv_lines,
    globex_docs,
    sparkplug(),
    sparkplug_with_units(),
    st.tuples(globex_docs, st.sampled_from(["utf-16", "utf-32", "utf-16-le", ""])).map(
        lambda t: _encoded(*t)
    ),
)


def _rss() -> int:
    with open("/proc/self/statm", encoding="ascii") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class Run:
    """What one fuzz run saw: cases, outcomes, the slowest case, resident memory."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.n = 0
        self.reasons: dict[str, int] = {}
        self.slowest_ms = 0.0
        self.rss_start = 0

    def check(self, content_type: str, payload: bytes) -> None:
        b = budgets.current()
        started = time.thread_time()
        out = normalize_message(content_type, payload)
        spent_ms = (time.thread_time() - started) * 1000
        self.n += 1
        self.slowest_ms = max(self.slowest_ms, spent_ms)
        # Within the budget: the timer interrupts at cpu_seconds; the rest is the dead
        # letter's own building, a fraction of a millisecond.
        assert spent_ms < b.cpu_seconds * 1000 + 20, (content_type, payload[:80], spent_ms)
        reason = out.get("error_reason")
        if reason:
            assert reason != "NORMALIZER_FAILED", (content_type, payload[:80], out)
            assert out["error_message"] and len(out["error_message"]) <= 1000
        else:
            assert isinstance(out["measurements"], list)
        self.reasons[reason or "OK"] = self.reasons.get(reason or "OK", 0) + 1
        if self.n == max(1, self.total // 10):
            gc.collect()
            self.rss_start = _rss()


def _generate(content_type: str, total: int) -> list[tuple[str, Any]]:
    """Return ``total`` cases drawn by hypothesis: (content type with parameters, payload).

    Drawn first, normalized after: hypothesis keeps what it learns of every example (about
    15 MB per thousand, measured), which would hide the normalize step's own memory.
    """
    drawn: list[tuple[str, Any]] = []

    @settings(
        max_examples=total,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(payload=cases, extra=params)
    def one(payload: Any, extra: str) -> None:
        drawn.append((content_type + extra, payload))

    one()
    return drawn


def _fuzz(content_type: str, total: int) -> Run:
    drawn = _generate(content_type, total)
    run = Run(len(drawn))
    # Once per process, outside any message: the plugin scan and the units registry build.
    normalize_message(content_type, b"")
    started = time.perf_counter()
    for ct, payload in drawn:
        run.check(ct, b"{" * payload if isinstance(payload, Big) else payload)
    elapsed = time.perf_counter() - started
    gc.collect()
    grown = _rss() - run.rss_start
    print(
        f"\nfuzz {content_type}: {run.n} cases in {elapsed:.1f} s, slowest "
        f"{run.slowest_ms:.2f} ms CPU, RSS {grown / 1e6:+.1f} MB after the first tenth, "
        f"outcomes {sorted(run.reasons.items())}"
    )
    assert grown < RSS_SLACK_BYTES, f"resident memory grew by {grown} bytes"
    return run


@pytest.mark.timeout(120)
@pytest.mark.parametrize("content_type", BUILT_IN)
def test_fuzz_smoke(content_type: str) -> None:
    run = _fuzz(content_type, FUZZ_SMOKE_CASES)
    assert run.n >= FUZZ_SMOKE_CASES // 2  # hypothesis may stop early on a small space


@pytest.mark.fuzz
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("content_type", BUILT_IN)
def test_fuzz_full(content_type: str, request: pytest.FixtureRequest) -> None:
    if "fuzz" not in (request.config.option.markexpr or ""):
        pytest.skip("the full fuzz check runs on demand: pytest -m fuzz (docs/benchmarks.md)")
    run = _fuzz(content_type, FUZZ_FULL_CASES)
    assert run.n >= FUZZ_FULL_CASES
