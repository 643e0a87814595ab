"""A gateway process for the SIGKILL test: runs commands slowly, logging each one.

``python -m tests.commands.gateway_proc --spool P --target T --log L`` runs a gateway
client whose handler appends ``start <id>`` to L, sleeps ``--work`` seconds, then appends
``done <id>`` (each line flushed and fsynced), until killed. The token comes from
``$HEADWATER_GATEWAY_TOKEN``.
"""

from __future__ import annotations

import argparse
import asyncio
import os

from headwater.gateway import GatewayClient, GatewayConfig, Spool
from headwater.proto.commands.v1.command_pb2 import Command


def note(path: str, line: str) -> None:
    with open(path, "a") as f:
        f.write(line + "\n")
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
    with Spool(args.spool) as spool:
        async with GatewayClient(spool, config, commands=handle) as client:
            await client.run(asyncio.Event())


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spool", required=True, help="the spool file")
    parser.add_argument("--target", required=True, help="ingest host:port")
    parser.add_argument("--log", required=True, help="file the handler appends to")
    parser.add_argument("--work", type=float, default=0.4, help="seconds per command")
    asyncio.run(main(parser.parse_args()))
