"""Example service: count completion events per device and outcome, in SQLite.

It reacts to every completion the enricher publishes (ENRICHED, DEAD_LETTERED, ...) and
keeps ``counts(device_id, outcome, n)`` up to date. Delivery is at least once, so both
layers of protection are used: the subscriber's SQLite dedup store skips what was handled
before a crash (cheap, before the handler runs), and the handler's write is idempotent by
itself: the completion's id and the count change commit in one transaction, so even a
crash between the two layers cannot count a completion twice.

    python examples/completion_subscriber.py --db counts.db --group my-service \
        --bootstrap-servers 127.0.0.1:9092 [--start earliest] [--max-seconds 60]

Prints the subscriber's counts as JSON when it stops (SIGTERM, Ctrl-C or --max-seconds).
Kafka security settings come from HEADWATER_KAFKA_*; on the embedded dev broker set
HEADWATER_KAFKA_ENABLE_IDEMPOTENCE=false (it rejects aiokafka's idempotent producer).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sqlite3
from typing import Any

from headwater.kafka_settings import KafkaSettings
from headwater.proto.events.v1 import completion_pb2
from headwater.subscriber.dedup import SqliteDedup
from headwater.subscriber.subscriber import Delivery, Subscriber, decode_completion
from headwater.topics import COMPLETIONS_TOPIC


def main() -> None:
    """Parse the arguments, run until stopped, print the counts."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--db", required=True, help="SQLite file for the counts and the dedup store"
    )
    parser.add_argument("--group", required=True, help="consumer group id")
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--topic", default=COMPLETIONS_TOPIC)
    parser.add_argument("--start", choices=["earliest", "latest"], help="only for a new group")
    parser.add_argument("--max-seconds", type=float, default=0, help="stop after this long")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args))))


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """Count completions until SIGTERM/SIGINT or --max-seconds; return the counts."""
    db = sqlite3.connect(args.db, isolation_level=None)
    db.execute(
        "CREATE TABLE IF NOT EXISTS counts (device_id TEXT, outcome TEXT, n INTEGER, "
        "PRIMARY KEY (device_id, outcome))"
    )
    db.execute("CREATE TABLE IF NOT EXISTS counted (key TEXT PRIMARY KEY)")
    dedup = SqliteDedup(args.db + ".dedup")

    async def count(delivery: Delivery) -> None:
        c = delivery.message
        assert isinstance(c, completion_pb2.Completion)
        outcome = completion_pb2.Outcome.Name(c.outcome).removeprefix("OUTCOME_")
        with db:  # one transaction: the id and the count change, or neither
            db.execute("BEGIN")
            if db.execute("INSERT OR IGNORE INTO counted VALUES (?)", (delivery.key,)).rowcount:
                db.execute(
                    "INSERT INTO counts VALUES (?, ?, 1) "
                    "ON CONFLICT (device_id, outcome) DO UPDATE SET n = n + 1",
                    (c.device_id, outcome),
                )

    subscriber = Subscriber(
        # Security and producer settings from HEADWATER_KAFKA_* (see the README).
        KafkaSettings.from_env(
            os.environ | {"HEADWATER_KAFKA_BOOTSTRAP_SERVERS": args.bootstrap_servers}
        ),
        args.group,
        [args.topic],
        count,
        decode_completion,
        dedup=dedup,
        start=args.start,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if args.max_seconds:
        loop.call_later(args.max_seconds, stop.set)
    await subscriber.run(stop)
    dedup.close()
    db.close()
    return subscriber.counts


if __name__ == "__main__":
    main()
