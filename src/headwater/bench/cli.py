"""``headwater bench``: benchmarks that print figures and ratios against ceilings."""

from __future__ import annotations

import argparse
import asyncio
import json


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``bench`` command group."""
    group = subparsers.add_parser(
        "bench", help="benchmarks", description="Benchmarks with ceilings measured in the same run."
    )
    commands = group.add_subparsers(dest="bench_command", required=True, metavar="COMMAND")
    ingest = commands.add_parser(
        "ingest",
        help="the ingest path against a bare gRPC echo and the raw Kafka producers",
        description=(
            "Start the embedded broker, the ingest service and a bare gRPC echo server; "
            "measure raw aiokafka and confluent-kafka producers, echo calls, and ingest "
            "single-message calls, batch calls and streams on the same records; print "
            "msgs/s, MB/s, p50/p99, peak RSS and the targets met or missed."
        ),
    )
    ingest.add_argument(
        "--single-messages", type=int, default=20_000, help="messages for single-message calls"
    )
    ingest.add_argument(
        "--batch-messages",
        type=int,
        default=100_000,
        help="messages for batches, streams, raw producers",
    )
    ingest.add_argument(
        "--payload-sizes", default="200,1024", help="comma-separated payload sizes in bytes"
    )
    ingest.add_argument(
        "--overload-seconds",
        type=float,
        default=0.0,
        help="also offer ~2x capacity this long and report RSS growth",
    )
    ingest.add_argument("--bootstrap", help="use this Kafka instead of the embedded broker")
    ingest.add_argument("--json", action="store_true", help="print the report as one JSON object")
    ingest.set_defaults(func=_ingest)


def _ingest(args: argparse.Namespace) -> int:
    from headwater.bench.ingest import BenchOptions, run_benchmark
    from headwater.ops.render import table

    opts = BenchOptions(
        single_messages=args.single_messages,
        batch_messages=args.batch_messages,
        payload_sizes=tuple(int(s) for s in args.payload_sizes.split(",")),
        overload_seconds=args.overload_seconds,
    )
    report = asyncio.run(run_benchmark(opts, args.bootstrap))
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"machine: {report['machine']}")
    print(table(report["results"], list(report["results"][0])))
    print()
    print(table(report["targets"], ["payload", "target", "value", "met"]))
    if "overload" in report:
        print()
        print("overload:", json.dumps(report["overload"]))
    return 0
