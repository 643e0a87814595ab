"""A gateway process for the kill-and-restart test: it spools readings while it sends.

``python -m tests.gateway.gateway_proc --spool P --target T --count N`` enqueues N
readings over a few devices in small batches (one transaction each), printing
``<message_id> <device_id> <sequence>`` for every message once its transaction has
committed, while the gateway client sends in the background. When all are enqueued it
waits for the spool to drain, prints ``DRAINED`` and exits. The token comes from
``$HEADWATER_GATEWAY_TOKEN``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from headwater.gateway import GatewayClient, GatewayConfig, NewMessage, Spool

CT = "application/vnd.acme.telemetry.v1+json"


async def main(args: argparse.Namespace) -> int:
    config = GatewayConfig(
        target=args.target,
        token=os.environ["HEADWATER_GATEWAY_TOKEN"],
        frame_messages=20,
        call_timeout_s=5.0,
        backoff_initial_s=0.05,
        backoff_max_s=0.5,
    )
    with Spool(args.spool) as spool:
        async with GatewayClient(spool, config) as client:
            stop = asyncio.Event()
            sender = asyncio.create_task(client.run(stop))
            for start in range(0, args.count, args.batch):
                readings = [
                    NewMessage(f"{args.prefix}-{i % 5}", CT, b'{"temp_c": %d}' % i)
                    for i in range(start, min(args.count, start + args.batch))
                ]
                enqueued = await client.enqueue_many("telemetry", readings)
                sys.stdout.write(
                    "".join(
                        f"{m.message_id} {m.device_id} {m.sequence}\n" for m in enqueued.messages
                    )
                )
                sys.stdout.flush()
                await asyncio.sleep(args.pause)
            drained = await client.drain(within_s=60)
            stop.set()
            await sender
    print("DRAINED" if drained else "NOT DRAINED", flush=True)
    return 0 if drained else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--spool", required=True)
    parser.add_argument("--target", required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--batch", type=int, default=25)
    parser.add_argument("--pause", type=float, default=0.01)
    parser.add_argument("--prefix", default="acme-kill")
    sys.exit(asyncio.run(main(parser.parse_args())))
