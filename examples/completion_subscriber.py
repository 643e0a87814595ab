r"""Example service: count completion events per device and outcome, in SQLite.

It reacts to every completion the enricher publishes (ENRICHED, DEAD_LETTERED, ...) and
keeps ``counts(device_id, outcome, n)`` up to date. Delivery is at least once, so it uses
both layers of protection: the subscriber's SQLite dedup store skips what was handled
before a restart (cheap, before the handler runs), and the handler's write is idempotent
by itself: the completion's id and the count change commit in one transaction, so even a
crash between the two layers cannot count a completion twice.

    python examples/completion_subscriber.py --db counts.db --group my-service \
        [--bootstrap-servers HOST:PORT] [--topic completions.v1] [--start earliest]

Runs until SIGTERM or Ctrl-C (finishing the record in hand, committing, leaving the
group), then prints the subscriber's counts as JSON. Kafka connection and security come
from HEADWATER_KAFKA_* (--bootstrap-servers overrides the address), the other subscriber
settings from HEADWATER_SUBSCRIBER_* (docs/subscribe.md). --start is for the first run of
a new group only: without it a group with no committed offset stops and says how to
choose one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sqlite3

from headwater.contracts import Completion, Outcome
from headwater.kafka.settings import KafkaSettings
from headwater.runtime.signals import async_stop_event
from headwater.subscriber import (
    Delivery,
    SqliteDedup,
    StartPointRequiredError,
    Subscriber,
    SubscriberSettings,
    decode_completion,
)
from headwater.topics import COMPLETIONS_TOPIC

SCHEMA = """
CREATE TABLE IF NOT EXISTS counts (
    device_id TEXT NOT NULL, outcome TEXT NOT NULL, n INTEGER NOT NULL,
    PRIMARY KEY (device_id, outcome));
CREATE TABLE IF NOT EXISTS counted (key TEXT PRIMARY KEY);
"""


def main() -> int:
    """Parse the arguments, run until stopped, print the counts; exit 2 without a start."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--db", required=True, help="SQLite file for the counts")
    parser.add_argument("--group", required=True, help="consumer group id of this service")
    parser.add_argument(
        "--bootstrap-servers", help="Kafka address (default $HEADWATER_KAFKA_BOOTSTRAP_SERVERS)"
    )
    parser.add_argument("--topic", default=COMPLETIONS_TOPIC, help="default %(default)s")
    parser.add_argument(
        "--start", choices=["earliest", "latest"], help="first run of a new group only"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s %(message)s")
    try:
        counts = asyncio.run(run(args))
    except StartPointRequiredError as exc:
        print(exc, flush=True)
        return 2
    print(json.dumps(counts), flush=True)
    return 0


def count_completion(db: sqlite3.Connection, key: str, c: Completion) -> None:
    """Count ``c`` once, whatever happens: the id and the count change commit together."""
    outcome = Outcome.Name(c.outcome).removeprefix("OUTCOME_")
    with db:  # one transaction: both rows or neither
        if db.execute("INSERT OR IGNORE INTO counted (key) VALUES (?)", (key,)).rowcount:
            db.execute(
                "INSERT INTO counts (device_id, outcome, n) VALUES (?, ?, 1) "
                "ON CONFLICT (device_id, outcome) DO UPDATE SET n = n + 1",
                (c.device_id, outcome),
            )


async def run(args: argparse.Namespace) -> dict[str, int]:
    """Count completions until SIGTERM/SIGINT; return the subscriber's counts."""
    db = sqlite3.connect(args.db)
    db.executescript(SCHEMA)
    dedup = SqliteDedup(args.db + ".dedup")

    async def handle(delivery: Delivery[Completion]) -> None:
        count_completion(db, delivery.key, delivery.message)

    # The arguments win over the environment; other settings come from HEADWATER_KAFKA_*
    # and HEADWATER_SUBSCRIBER_* (docs/subscribe.md).
    env = dict(os.environ)
    env["HEADWATER_SUBSCRIBER_GROUP_ID"] = args.group
    env["HEADWATER_SUBSCRIBER_TOPICS"] = args.topic
    env["HEADWATER_SUBSCRIBER_START"] = args.start or ""
    if args.bootstrap_servers:
        env["HEADWATER_KAFKA_BOOTSTRAP_SERVERS"] = args.bootstrap_servers
    subscriber = Subscriber(
        KafkaSettings.from_env(env),
        SubscriberSettings.from_env(env),
        handle,
        decode_completion,
        dedup=dedup,
    )
    stop = async_stop_event()  # SIGINT or SIGTERM, whatever was inherited
    try:
        await subscriber.run(stop)
    finally:
        dedup.close()
        db.close()
    return subscriber.counts


if __name__ == "__main__":
    raise SystemExit(main())
