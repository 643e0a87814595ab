"""Bench: MQTT connector throughput, edge broker -> spool (QoS 1 acknowledged once spooled).

A standalone module for the lead to place under the dev tooling
(``python scripts/bench_gateway_connectors.py --messages 20000``). It starts Mosquitto on a free
loopback port, runs the MQTT connector of ``headwater gateway run`` into a spool (its
ingest target unreachable, so only the edge side is measured), publishes N QoS 1
messages of ~100 bytes from one publisher and prints messages/s from the first publish
to the last PUBACK-able spool commit (spool depth == N).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiomqtt

from headwater.gateway import GatewayClient, GatewayConfig, Spool
from headwater.gateway.app.config import parse
from headwater.gateway.connectors.base import Sink
from headwater.gateway.connectors.mqtt import MqttConnector


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_broker(workdir: Path) -> tuple[subprocess.Popen[bytes], int]:
    """Start Mosquitto on a free loopback port; return it and the port."""
    port = _port()
    conf = workdir / "mosquitto.conf"
    root = "user root\n" if os.geteuid() == 0 else ""
    conf.write_text(
        f"listener {port} 127.0.0.1\nallow_anonymous true\nmax_queued_messages 0\n"
        f"max_inflight_messages 1000\n{root}"
    )
    mosquitto = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
    broker = subprocess.Popen([mosquitto, "-c", str(conf)], stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    return broker, port


async def bench(messages: int, workdir: Path, port: int) -> dict[str, float]:
    """Run one measurement against the broker on ``port``; return the figures."""
    config = parse(
        {
            "ingest": {"target": f"127.0.0.1:{_port()}"},
            "spool": {"path": str(workdir / "spool.db")},
            "connectors": [
                {
                    "name": "bench",
                    "type": "mqtt",
                    "broker": {"host": "127.0.0.1", "port": port, "client_id": "bench"},
                    "topics": [
                        {
                            "filter": "bench/+",
                            "device_id": "acme-{1}",
                            "content_type": "application/json",
                        }
                    ],
                }
            ],
        }
    )
    with Spool(workdir / "spool.db", config.spool.limits, synchronous="FULL") as spool:
        client = GatewayClient(spool, GatewayConfig(target=config.ingest.target))
        connector = MqttConnector(config.connectors[0], Sink(client, "backpressure"))
        stop = asyncio.Event()
        task = asyncio.create_task(connector.run(stop))
        while not connector.health.connected:  # noqa: ASYNC110 (a health flag, polled)
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)
        payload = json.dumps({"temp_c": 21.5, "pad": "x" * 64}).encode()
        start = time.perf_counter()
        async with aiomqtt.Client("127.0.0.1", port, max_inflight_messages=1000) as pub:
            for first in range(0, messages, 500):  # 500 in flight at a time
                await asyncio.gather(
                    *(
                        pub.publish(f"bench/{i % 100:03d}", payload, qos=1)
                        for i in range(first, min(messages, first + 500))
                    )
                )
        published = time.perf_counter() - start
        while spool.depth < messages:  # noqa: ASYNC110 (the spool's depth, polled)
            await asyncio.sleep(0.01)
        spooled = time.perf_counter() - start
        stop.set()
        await task
        await client.close()
    return {
        "messages": messages,
        "publish_s": round(published, 2),
        "spooled_s": round(spooled, 2),
        "messages_per_s": round(messages / spooled),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        broker, port = start_broker(Path(tmp))
        try:
            print(json.dumps(asyncio.run(bench(args.messages, Path(tmp), port))))
        finally:
            broker.terminate()
            broker.wait(10)
    sys.exit(0)
