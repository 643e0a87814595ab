"""``headwater devstack``: the whole pipeline on one machine (the README's run command)."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``devstack`` command group."""
    group = subparsers.add_parser(
        "devstack",
        help="run the whole pipeline locally with a simulated fleet",
        description="The dev stack: embedded broker, ingest, enricher and a simulated fleet.",
    )
    commands = group.add_subparsers(dest="devstack_command", required=True, metavar="COMMAND")
    run = commands.add_parser(
        "run",
        help="run for a bounded time and print a summary",
        description=(
            "Start the embedded broker (Tansu) on loopback, create the topics, start the "
            "ingest service and the enricher, drive a simulated fleet of gateways for "
            "--duration seconds, then read every topic back and print a summary. Exits 1 "
            "if any acknowledged message is missing from Kafka."
        ),
    )
    run.add_argument("--duration", type=float, default=60.0, help="seconds of fleet traffic")
    run.add_argument("--rate", type=float, default=500.0, help="messages per second, in total")
    run.add_argument("--gateways", type=int, default=8, help="simulated gateways (+1 rogue)")
    run.add_argument("--devices", type=int, default=25, help="devices per gateway")
    run.add_argument("--no-enricher", action="store_true", help="run the ingest path only")
    run.add_argument(
        "--enricher-drain",
        type=float,
        default=120.0,
        help="seconds to wait for the enricher to complete every message after traffic stops",
    )
    run.add_argument("--workdir", type=Path, default=Path(".devstack"), help="logs and state")
    run.add_argument("--json", action="store_true", help="print the summary as one JSON line")
    run.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from headwater.devstack.stack import DevStackOptions, run_devstack
    from headwater.logs import configure_logging

    configure_logging("WARNING")
    summary = asyncio.run(
        run_devstack(
            DevStackOptions(
                duration_s=args.duration,
                rate=args.rate,
                gateways=args.gateways,
                devices_per_gateway=args.devices,
                with_enricher=not args.no_enricher,
                enricher_drain_s=args.enricher_drain,
                workdir=args.workdir,
                json_output=args.json,
            )
        )
    )
    ok = summary["acked_but_missing_in_kafka"] == 0
    enricher = summary.get("enricher")
    if enricher is not None:
        ok = ok and enricher["messages_without_terminal_completion"] == 0
    return 0 if ok else 1
