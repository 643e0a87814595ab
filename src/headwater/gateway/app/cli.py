"""``headwater gateway run``, ``check-config`` and ``health``: the edge gateway program."""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys

from headwater.gateway.app.config import ConfigError, GatewayFile, load
from headwater.runtime.logs import configure_logging

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``run`` and ``check-config`` to the ``gateway`` command group."""
    run = sub.add_parser(
        "run",
        help="run the edge gateway: connectors (MQTT, OPC UA, Modbus) into the spool, to ingest",
        description="Run the connectors of a gateway.yaml, spool what they read and send it "
        "to the ingest service; commands from the cloud go to the connector of their device. "
        "Stops cleanly on SIGINT or SIGTERM. See docs/gateway.md.",
    )
    run.add_argument("--config", required=True, help="the gateway.yaml file")
    run.set_defaults(func=_run)
    check = sub.add_parser(
        "check-config",
        help="check a gateway.yaml: one line per bad field, exit 2 if any",
        description="Read a gateway.yaml and report every bad field (exit 2), or print the "
        "connectors it defines (exit 0). Secrets are read from the environment variables "
        "the file names, and checked to be set, never printed.",
    )
    check.add_argument("--config", required=True, help="the gateway.yaml file")
    check.set_defaults(func=_check)
    health = sub.add_parser(
        "health",
        help="ask a running gateway for its health report: exit 0 when every connector is up",
        description="Ask the gateway of a gateway.yaml for its health report (GET /health on "
        "its health.listen) and print it: exit 0 when every connector is connected, 1 when "
        "one is not or the gateway does not answer, 2 for a bad file or one with no "
        "health.listen. The container image's HEALTHCHECK.",
    )
    health.add_argument("--config", required=True, help="the gateway.yaml file")
    health.set_defaults(func=_health)


def _load(path: str, command: str) -> GatewayFile | None:
    try:
        return load(path)
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"headwater gateway {command}: {exc.source}: {problem}", file=sys.stderr)
        return None


def _check(args: argparse.Namespace) -> int:
    config = _load(args.config, "check-config")
    if config is None:
        return 2
    summary = {
        "target": config.ingest.target,
        "spool": str(config.spool.path),
        "when_full": config.spool.when_full,
        "connectors": [{"name": c.name, "type": c.type} for c in config.connectors],
    }
    print(json.dumps(summary))
    return 0


def _health(args: argparse.Namespace) -> int:
    config = _load(args.config, "health")
    if config is None:
        return 2
    if config.health.listen is None:
        print(f"headwater gateway health: {args.config}: no health.listen", file=sys.stderr)
        return 2
    from headwater.gateway.app.health import probe

    answer = probe(config.health.listen)
    if answer is None:
        print(f"headwater gateway health: no answer on {config.health.listen}", file=sys.stderr)
        return 1
    ok, report = answer
    print(json.dumps(report))
    return 0 if ok else 1


def _run(args: argparse.Namespace) -> int:
    config = _load(args.config, "run")
    if config is None:
        return 2
    configure_logging()
    from headwater.gateway.app.runner import run  # grpc and the connectors' libraries

    async def main() -> None:
        stop = asyncio.Event()
        # Our own handlers, whatever the parent left us (ignored or blocked signals: a
        # shell's background job, a supervisor's mask).
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
        loop = asyncio.get_running_loop()
        for sig in _STOP_SIGNALS:
            loop.add_signal_handler(sig, stop.set)
        await run(config, stop)

    asyncio.run(main())
    return 0
