"""Benchmark: what hostile unit spellings cost the normalize step, in CPU and memory (issue 35).

``python -m headwater_dev.bench.enricher.units`` prints, in one process without Spark:

- the CPU time of ``normalize_batch`` over a Sparkplug B DBIRTH of ``--metrics`` metrics, each
  with a different valid compound ``engUnit`` (``kPa*mg*ns*cd*Hz``...), and how it ended;
- the process's RSS before and after converting ``--spellings`` distinct spellings (the
  units cache and pint's own caches);
- the RSS before and after ``--long-units`` Globex messages whose unit is 200 KB of random
  hex, new in each.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import itertools
import os
import sys
import time
from collections.abc import Iterator

#: SI prefixes that pint knows, for unit spellings that are all different and all valid.
PREFIXES = ("", "k", "m", "n", "M", "G", "u", "c", "d", "h", "p", "f", "T", "a")
GLOBEX = "application/vnd.globex.telemetry.v2+json"
DBIRTH = "application/vnd.eclipse.sparkplug.b+protobuf; message-type=DBIRTH"


#: The units each spelling combines, one prefix on each: 14^5 spellings per set, ~4,500 a
#: birth, so the sets last ~480 births of new spellings (the first set alone lasted 119).
UNIT_SETS = (
    ("Pa", "g", "s", "cd", "Hz"),
    ("Pa", "g", "s", "mol", "Hz"),
    ("V", "g", "s", "cd", "Hz"),
    ("A", "g", "s", "cd", "Hz"),
)


def distinct_spellings(skip: int = 0) -> Iterator[str]:
    """Valid compound unit spellings, all different (4 x 14^5 of them), from the ``skip``-th on."""
    every = (
        f"{a}{u[0]}*{b}{u[1]}*{c}{u[2]}*{d}{u[3]}*{e}{u[4]}"
        for u in UNIT_SETS
        for e, d, c, b, a in itertools.product(PREFIXES, repeat=5)
    )
    return itertools.islice(every, skip, None)


def distinct_units_birth(count: int = 4_500, salt: int = 0) -> bytes:
    """A DBIRTH of ``count`` metrics, each with a different valid compound ``engUnit``.

    Issue 35's input: each spelling costs the units library a parse (0.3 to 1 ms); 4,500 of
    them are ~247 KB, under the ingest contract's 256 KiB. ``salt`` picks another set of
    spellings (a process's units cache may know the first).
    """
    from headwater.proto.sparkplug.v1 import sparkplug_b_pb2 as spb

    p = spb.Payload(timestamp=1_700_000_000_000, seq=0)
    for i, unit in enumerate(itertools.islice(distinct_spellings(salt * count), count)):
        m = p.metrics.add(name=f"m{i}", alias=i, datatype=spb.DATA_TYPE_DOUBLE, double_value=1.0)
        m.properties.keys.append("engUnit")
        m.properties.values.add(type=spb.DATA_TYPE_STRING, string_value=unit)
    return p.SerializeToString()


def rss_mb() -> float:
    """This process's resident set size now, in MB (Linux)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def main(argv: list[str] | None = None) -> int:
    """Print the three figures of the module's docstring."""
    parser = argparse.ArgumentParser(
        prog="python -m headwater_dev.bench.enricher.units", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--metrics", type=int, default=4_500)
    parser.add_argument("--spellings", type=int, default=100_000)
    parser.add_argument("--long-units", type=int, default=10_000)
    args = parser.parse_args(argv)
    from headwater.enricher.hop import units
    from headwater.enricher.hop.normalize import normalize_batch, normalize_message

    units.warm()  # once per process, outside any message's budget
    birth = distinct_units_birth(args.metrics)
    started = time.process_time()
    (row,) = normalize_batch([(DBIRTH, birth)])
    ended = row.get("error_reason") or f"normalized, {len(row.get('units') or [])} units"
    print(
        f"DBIRTH of {args.metrics} new units ({len(birth)} bytes): "
        f"{time.process_time() - started:.2f} s CPU, {ended}"
    )

    gc.collect()
    before, started = rss_mb(), time.process_time()
    for spelling in itertools.islice(distinct_spellings(args.metrics), args.spellings):
        with contextlib.suppress(units.UnitError):
            units.conversion(spelling)
    gc.collect()
    print(
        f"{args.spellings} distinct spellings: RSS {before:.0f} -> {rss_mb():.0f} MB, "
        f"{time.process_time() - started:.1f} s CPU"
    )

    before, reasons = rss_mb(), set()
    for _ in range(args.long_units):
        unit = os.urandom(100_000).hex().encode()
        out = normalize_message(GLOBEX, b'{"readings": [{"k": "t", "v": 1, "u": "%s"}]}' % unit)
        reasons.add(out.get("error_reason"))
    gc.collect()
    print(
        f"{args.long_units} messages with 200 KB units: RSS {before:.0f} -> {rss_mb():.0f} MB, "
        f"dead letters {sorted(r for r in reasons if r)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
