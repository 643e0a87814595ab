"""Micro-benchmark of the Python hop in front of the JVM state (``arrow_hop``), without Spark.

``python -m headwater_dev.bench.enricher.hop --messages 20000`` builds the benchmark's telemetry
records (``traffic.telemetry_record``), puts them in Arrow arrays as the hop's arguments
arrive from Spark (``arrow_hop.inputs``), runs the hop's function over them and prints the
CPU time per message (``time.process_time``, so other processes on the machine count less
than in wall time). Issue 27's budget is ~20 µs per message on these cores.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence

import pyarrow as pa

from headwater.enricher.hop.arrow_hop import HEADERS, HOP, decoder
from headwater_dev.bench.enricher.traffic import telemetry_record


def _arrow_schemas(*ddls: str) -> list[pa.Schema]:
    # The types Spark's Arrow conversion uses. PySpark parses DDL in the JVM, so a local
    # session starts for that only (before the measurement) and stops again.
    from pyspark.sql import SparkSession
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    active = SparkSession.getActiveSession()
    spark = active or SparkSession.builder.master("local[1]").appName("bench-hop").getOrCreate()
    try:
        out = []
        for ddl in ddls:
            struct = StructType.fromDDL(ddl)
            assert isinstance(struct, StructType)
            out.append(to_arrow_schema(struct))
        return out
    finally:
        if active is None:  # a session of the caller's stays up
            spark.stop()


def main(argv: list[str] | None = None) -> int:
    """Print the hop's CPU time per message as one JSON line."""
    parser = argparse.ArgumentParser(prog="python -m headwater_dev.bench.enricher.hop")
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=10_000, help="rows per Arrow batch")
    args = parser.parse_args(argv)
    now = int(time.time() * 1000)
    rows = []
    for i in range(args.messages):
        key, value, headers = telemetry_record(i, 1000, "hop", now)
        found = dict(headers)  # the last of each name, as Spark SQL picks them
        rows.append(("ingest.telemetry.v1", key.decode(), value, *(found.get(h) for h in HEADERS)))
    (hop,) = _arrow_schemas(HOP)

    def arrays(part: Sequence[tuple[object, ...]]) -> tuple[pa.Array, ...]:
        return tuple(pa.array(list(column)) for column in zip(*part, strict=True))

    batches = [arrays(rows[i : i + args.batch]) for i in range(0, len(rows), args.batch)]
    run = decoder("master.devices.v1", hop)
    # Warm-up: a worker builds the units registry once (~0.4 s), then serves every batch;
    # counted here it would add ~20 us to each of 20,000 messages.
    for _ in run(iter([arrays(rows[:100])])):
        pass
    t0, w0 = time.process_time(), time.perf_counter()
    out = sum(len(b) for b in run(iter(batches)))
    cpu, wall = time.process_time() - t0, time.perf_counter() - w0
    print(
        json.dumps(
            {
                "messages": out,
                "cpu_us_per_message": round(cpu / out * 1e6, 1),
                "wall_us_per_message": round(wall / out * 1e6, 1),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
