"""``headwater gateway``: look into a gateway's spool, and drain it to the ingest service."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from dataclasses import asdict

from headwater.gateway.client import GatewayClient, GatewayConfig
from headwater.gateway.spool import Spool, SpoolLockedError
from headwater.runtime.logs import configure_logging
from headwater.runtime.signals import interrupt_on_stop


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``gateway stats``, ``drain``, ``run`` and ``check-config``."""
    gateway = subparsers.add_parser(
        "gateway", help="the edge gateway (run, check-config) and its spool (stats, drain)"
    )
    sub = gateway.add_subparsers(dest="gateway_command", required=True, metavar="COMMAND")
    stats = sub.add_parser(
        "stats",
        help="depth, bytes, oldest age, counters and rejected messages of a spool (JSON)",
        description="Print a spool's depth, size, oldest age, counters (delivered, retried, "
        "rejected, dropped_oldest, expired, refused) and its rejected messages as JSON.",
    )
    stats.add_argument("--spool", required=True, help="the spool's SQLite file")
    stats.set_defaults(func=_stats)
    drain = sub.add_parser(
        "drain",
        help="send everything a spool holds, then exit",
        description="Send every spooled message to the ingest service (deleting each after "
        "its OK; permanent rejections move to the rejected table), then exit. Exit 1 if "
        "messages are still spooled at --within.",
    )
    drain.add_argument("--spool", required=True, help="the spool's SQLite file")
    GatewayConfig.add_arguments(drain)
    drain.add_argument(
        "--token-env",
        default=GatewayConfig.variable("token"),
        help="environment variable holding the bearer token (default: %(default)s)",
    )
    drain.add_argument("--batch", action="store_true", help="batch calls instead of a stream")
    drain.add_argument("--within", type=float, default=300.0, help="give up after SECONDS")
    drain.set_defaults(func=_drain)
    from headwater.gateway.app import cli as app_cli  # the edge gateway: run, check-config

    app_cli.register(sub)


def _stats(args: argparse.Namespace) -> int:
    try:
        spool = Spool(args.spool)
    except SpoolLockedError as exc:
        print(f"headwater gateway stats: {exc}", file=sys.stderr)
        return 2
    with spool:
        stats = asdict(spool.stats())
        stats["rejected"] = [
            {"message_id": r.message_id, "code": r.code, "reason": r.reason, "detail": r.detail}
            for r in spool.rejected()
        ]
    print(json.dumps(stats, indent=2))
    return 0


def _drain(args: argparse.Namespace) -> int:
    config = GatewayConfig.from_args(
        args, token=os.environ.get(args.token_env) or None, use_stream=not args.batch
    )

    async def run() -> bool:
        with Spool(args.spool) as spool:
            async with GatewayClient(spool, config) as client:
                return await client.drain(args.within)

    interrupt_on_stop()  # Ctrl-C/SIGTERM stop the drain however it was launched
    configure_logging()  # the sender's retries and failures, as JSON lines on stderr
    try:
        empty = asyncio.run(run())
    except SpoolLockedError as exc:
        print(f"headwater gateway drain: {exc}", file=sys.stderr)
        return 2
    if not empty:
        print("messages are still spooled; see `headwater gateway stats`", file=sys.stderr)
    return 0 if empty else 1
