"""A gateway process for the tests that count executions: it logs each command it runs.

``python -m tests.commands.gateway_proc --spool P --target T --log L`` runs a gateway
client whose handler appends ``start <id> <unix time>`` to L, sleeps ``--work`` seconds,
then appends ``done <id> <unix time>`` (each line flushed and fsynced), until killed
(SIGKILL) or stopped (SIGTERM: a clean stop, exit 0). The token comes from
``$HEADWATER_GATEWAY_TOKEN``. ``--idempotent`` registers the handler as idempotent.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import time

from headwater.gateway import GatewayClient, GatewayConfig, Spool
from headwater.proto.commands.v1.command_pb2 import Command


def note(path: str, line: str) -> None:
    with open(path, "a") as f:
        f.write(f"{line} {time.time():.6f}\n")
        f.flush()
        os.fsync(f.fileno())


async def main(args: argparse.Namespace) -> None:
    async def handle(command: Command) -> bytes:
        note(args.log, f"start {command.command_id}")
        await asyncio.sleep(args.work)
        note(args.log, f"done {command.command_id}")
        return b"done"

    config = GatewayConfig(
        target=args.target,
        token=os.environ["HEADWATER_GATEWAY_TOKEN"],
        call_timeout_s=5.0,
        backoff_initial_s=0.05,
        backoff_max_s=0.5,
    )
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    with Spool(args.spool) as spool:
        async with GatewayClient(
            spool, config, commands=handle, idempotent_commands=args.idempotent
        ) as client:
            await client.run(stop)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spool", required=True, help="the spool file")
    parser.add_argument("--target", required=True, help="ingest host:port")
    parser.add_argument("--log", required=True, help="file the handler appends to")
    parser.add_argument("--work", type=float, default=0.4, help="seconds per command")
    parser.add_argument(
        "--idempotent", action="store_true", help="the handler may run a command again"
    )
    asyncio.run(main(parser.parse_args()))
