"""``headwater ingest``: run the ingest gRPC service."""

from __future__ import annotations

import argparse
import asyncio
import sys

from headwater.ingest.auth import hash_token


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``ingest`` command group."""
    ingest = subparsers.add_parser(
        "ingest",
        help="the gRPC ingest service",
        description="The gRPC ingest service: gateways -> Kafka ingest topics.",
    )
    commands = ingest.add_subparsers(dest="ingest_command", required=True, metavar="COMMAND")
    serve = commands.add_parser(
        "serve",
        help="serve the IngestService until SIGTERM",
        description=(
            "Serve the IngestService. Configuration comes from HEADWATER_INGEST_* and "
            "HEADWATER_KAFKA_* environment variables (see the README's settings table)."
        ),
    )
    serve.set_defaults(func=_serve)
    token = commands.add_parser(
        "hash-token",
        help="print the token_sha256 of a bearer token for the tokens file",
        description="Read a bearer token from standard input; print its SHA-256 hex digest.",
    )
    token.set_defaults(func=_hash_token)


def _serve(_args: argparse.Namespace) -> int:
    from headwater.ingest.server import serve
    from headwater.ingest.settings import IngestSettings
    from headwater.logs import configure_logging
    from headwater.settings_env import SettingError

    configure_logging()
    try:
        settings = IngestSettings.from_env()
    except SettingError as exc:
        print(f"headwater ingest serve: {exc}", file=sys.stderr)
        return 2
    asyncio.run(serve(settings))
    return 0


def _hash_token(_args: argparse.Namespace) -> int:
    token = sys.stdin.readline().strip()
    if not token:
        print("headwater ingest hash-token: no token on standard input", file=sys.stderr)
        return 2
    print(hash_token(token))
    return 0
