"""``headwater ingest``: run the ingest gRPC service; make and hash gateway tokens.

Only the standard library and settings at import time: gRPC, Kafka clients and YAML are
imported when a command runs, so ``headwater --help`` works with any extra installed.
"""

from __future__ import annotations

import argparse
import secrets
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from headwater.ingest.settings import IngestSettings

#: Bytes of randomness in a token from ``new-token`` (256 bits, like the dev stack's).
TOKEN_BYTES = 32


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``ingest`` command group."""
    from headwater.ingest.commands.settings import CommandSettings
    from headwater.ingest.settings import IngestSettings
    from headwater.kafka.options import add_kafka_options
    from headwater.runtime.logs import LogSettings
    from headwater.runtime.startup import EnvHelpFormatter, env_help

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
            "Serve the IngestService. Configuration comes from the flags and the environment "
            "variables below (a flag wins; the README's settings table explains each); the "
            "standard OTEL_* "
            "variables configure telemetry. Exits 2 with one line on stderr when it cannot "
            "start (a bad setting, tokens file or TLS file)."
        ),
        epilog=env_help(IngestSettings.from_env, CommandSettings.from_env, LogSettings.from_env),
        formatter_class=EnvHelpFormatter,
    )
    IngestSettings.add_arguments(serve)
    add_kafka_options(serve)
    serve.set_defaults(func=_serve)
    token = commands.add_parser(
        "hash-token",
        help="print the token_sha256 of a bearer token for the tokens file",
        description="Read a bearer token from standard input; print its SHA-256 hex digest.",
    )
    token.set_defaults(func=_hash_token)
    new = commands.add_parser(
        "new-token",
        help="make a new bearer token; print it and its tokens-file entry",
        description=(
            "Print a new random bearer token (give it to the gateway, e.g. as "
            "HEADWATER_GATEWAY_TOKEN) and, on the following lines, the tokens-file entry with "
            "its token_sha256 (only the hash goes into the tokens file)."
        ),
    )
    new.add_argument("--gateway-id", default="gw-CHANGE-ME", help="the entry's gateway id")
    new.add_argument("--tenant", default="CHANGE-ME", help="the tenant the gateway belongs to")
    new.add_argument(
        "--device",
        action="append",
        dest="devices",
        help="device-id pattern the gateway may speak for (repeat; default: none)",
    )
    new.set_defaults(func=_new_token)


def preflight(settings: IngestSettings) -> None:
    """Check what ``serve`` reads once at start-up; raise StartupError naming what is wrong.

    The tokens file must parse (a server that would refuse every gateway is not started);
    TLS files must be readable and hold PEM.
    """
    from headwater.runtime.startup import StartupError, require_readable

    for field in ("tls_cert_file", "tls_key_file", "tls_client_ca_file"):
        name, path = settings.variable(field), getattr(settings, field)
        if path:
            require_readable(name, path)
            with open(path, "rb") as f:
                if b"-----BEGIN " not in f.read():
                    raise StartupError(f"{name}={path}: not a PEM file")
    if settings.tokens_file:
        _check_tokens_file(settings.tokens_file)


def _check_tokens_file(path: str) -> None:
    """Parse the tokens file as the service will; raise StartupError saying what is wrong."""
    import yaml

    from headwater.ingest.admission.auth import parse_tokens
    from headwater.ingest.settings import IngestSettings
    from headwater.runtime.startup import StartupError, require_readable

    name = IngestSettings.variable("tokens_file")
    require_readable(name, path)
    try:
        with open(path, encoding="utf-8") as f:
            parse_tokens(f.read())
    except yaml.YAMLError as exc:
        # The parser's message says line and column; folded to one line.
        raise StartupError(f"{name}={path}: not valid YAML: {' '.join(str(exc).split())}") from None
    except (OSError, ValueError) as exc:  # TokensFileError, UnicodeDecodeError
        raise StartupError(f"{name}={path}: {' '.join(str(exc).split())}") from None


def _serve(args: argparse.Namespace) -> int:
    from headwater.ingest import event_loop
    from headwater.ingest.rpc.server import serve
    from headwater.ingest.settings import IngestSettings
    from headwater.runtime.logs import configure_logging

    configure_logging()
    # SettingError and StartupError end in one line (headwater.cli.main).
    settings = IngestSettings.from_args(args)
    preflight(settings)
    event_loop.run(serve(settings), settings.event_loop)
    return 0


def _hash_token(_args: argparse.Namespace) -> int:
    from headwater.ingest.admission.auth import hash_token

    token = sys.stdin.readline().strip()
    if not token:
        print("headwater ingest hash-token: no token on standard input", file=sys.stderr)
        return 2
    print(hash_token(token))
    return 0


def _new_token(args: argparse.Namespace) -> int:
    import json

    from headwater.ingest.admission.auth import hash_token

    token = secrets.token_urlsafe(TOKEN_BYTES)
    # The token alone on the first line, so `| head -1` hands it to a secret store; the
    # rest is the tokens-file entry (YAML; JSON strings are valid YAML scalars).
    print(token)
    print("# tokens file entry (the token itself is not stored there):")
    print(f"  - id: {json.dumps(args.gateway_id)}")
    print(f"    tenant: {json.dumps(args.tenant)}")
    print(f"    token_sha256: {hash_token(token)}")
    print(f"    devices: {json.dumps(args.devices or [])}")
    return 0
