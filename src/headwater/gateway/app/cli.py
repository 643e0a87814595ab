"""``headwater gateway run`` and ``headwater gateway check-config``."""

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
