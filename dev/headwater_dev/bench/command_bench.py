"""``headwater bench commands``: how fast a written command reaches its connected gateway.

One run starts the embedded broker (or uses ``--bootstrap``) and ``headwater ingest
serve`` in its own process (commands on, topics under a fresh prefix), connects
``--gateways`` gateway clients from this process (each bound to its share of
``--devices`` devices, its own spool, a handler that does nothing) and writes commands
open loop at ``--rate`` per second, round robin over the devices, for ``--seconds``.

Measured per command, from its ``created_time`` (set as it is written):

- stored: the gateway's spool has it (what the gateway acknowledges right after);
- DELIVERED written: the broker timestamp of its first DELIVERED record on
  command-status.v1 (ingest's, written at the gateway's acknowledgement; the gateway's
  report through its sender, ingest and the relay comes later);
- EXECUTED written: the same for EXECUTED (ingest's, written from the outcome the
  gateway sends on its command stream as the handler returns; the report comes later).

With ``--offline-seconds``, then the gateways go away and come back (``command_offline``).

Then the cost of "every replica reads every command": a fresh command book is filled
from the run's topics (catch-up time, records per second) and a book of one waiting
command for each of 10,000 devices is measured (memory).

The sender here writes Command records with one producer (linger 5 ms), not through
``CommandSender`` (a flush per command, and a QUEUED record each): the target is about
delivery, not about the sender.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
import uuid
from pathlib import Path
from typing import Any

from headwater.ingest.commands.settings import CommandSettings
from headwater.ingest.settings import IngestSettings
from headwater.kafka.admin import ensure_topics
from headwater.kafka.settings import KafkaSettings
from headwater.proto.commands.v1.command_pb2 import Command
from headwater.proto.commands.v1.command_status_pb2 import CommandState
from headwater.runtime.logs import LogSettings
from headwater.topics import (
    COMMAND_OWNERS_TOPIC,
    COMMAND_REPORTS_TOPIC,
    COMMAND_STATUS_TOPIC,
    COMMANDS_TOPIC,
    TopicSpec,
)
from headwater_dev.bench import command_offline, server_proc
from headwater_dev.bench.command_traffic import TENANT, read_statuses, run_gateways, write_commands
from headwater_dev.bench.loadgen import percentile_ms
from headwater_dev.bench.report import machine
from headwater_dev.devstack import processes, seeding
from headwater_dev.devstack.broker import EmbeddedBroker
from headwater_dev.devstack.ports import free_port


def _tokens(gateways: int) -> str:
    return seeding.tokens_yaml(
        seeding.GatewayEntry(f"gw-{g}", TENANT, f"token-{g}", (f"g{g}-*",)) for g in range(gateways)
    )


def _start_ingest(
    servers: str, port: int, prefix: str, tokens: Path, log: Path
) -> subprocess.Popen[bytes]:
    ingest, commands = IngestSettings.variable, CommandSettings.variable
    env = {
        **os.environ,
        KafkaSettings.variable("bootstrap_servers"): servers,
        ingest("listen_address"): f"127.0.0.1:{port}",
        ingest("metrics_port"): "0",
        ingest("tokens_file"): str(tokens),
        commands("topic_prefix"): prefix,
        commands("relay_group"): f"{prefix}relay",
        LogSettings.variable("log_level"): "ERROR",
    }
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    headwater = str(Path(sys.executable).parent / "headwater")
    with open(log, "wb") as out:  # the child keeps its own descriptor
        return subprocess.Popen(
            [headwater, "ingest", "serve"], env=env, stdout=out, stderr=subprocess.STDOUT
        )


async def _catch_up_cost(kafka: KafkaSettings, prefix: str) -> dict[str, Any]:
    """A fresh replica's book: time to read the run's topics to their end."""
    from headwater.ingest.commands.book import CommandBook
    from headwater.ingest.commands.feed import CommandFeed

    book = CommandBook()
    feed = CommandFeed(
        kafka,
        book,
        prefix + COMMANDS_TOPIC,
        prefix + COMMAND_STATUS_TOPIC,
        prefix + COMMAND_OWNERS_TOPIC,
    )
    started = time.monotonic()
    cpu = time.process_time()
    task = asyncio.create_task(feed.run())
    await asyncio.wait_for(feed.caught_up.wait(), 300)
    elapsed = time.monotonic() - started
    used = time.process_time() - cpu
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return {"catch_up_s": round(elapsed, 2), "catch_up_cpu_s": round(used, 2), "waiting": book.size}


def _book_memory(devices: int = 10_000) -> dict[str, Any]:
    """Bytes held by a book with one waiting command per device, and time per add."""
    from headwater.ingest.commands.book import CommandBook

    commands = []
    now = int(time.time() * 1000)
    for d in range(devices):
        c = Command(command_id=uuid.uuid4().hex, tenant=TENANT, device_id=f"d{d}", name="noop")
        c.payload = b'{"setpoint": 21.5}'
        c.created_time.FromMilliseconds(now)
        c.expires_time.FromMilliseconds(now + 600_000)
        commands.append(c)
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    book = CommandBook()
    started = time.perf_counter()
    for offset, c in enumerate(commands):
        book.add(c, offset)
    add_s = time.perf_counter() - started
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return {
        "devices": devices,
        "book_bytes": held,
        "bytes_per_waiting_command": round(held / devices),
        "add_us": round(add_s / devices * 1e6, 1),
    }


def run(
    rate: float,
    seconds: float,
    devices: int,
    gateways: int,
    bootstrap: str | None,
    offline_seconds: float = 0.0,
    offline_rate: float = 10.0,
) -> dict[str, Any]:
    """Run the benchmark; return the figures."""
    result: dict[str, Any] = {
        "machine": machine(),
        "options": {
            "rate": rate,
            "seconds": seconds,
            "devices": devices,
            "gateways": gateways,
            "offline_seconds": offline_seconds,
            "offline_rate": offline_rate,
        },
    }
    broker = None if bootstrap else EmbeddedBroker().start()
    servers = bootstrap or (broker.bootstrap_servers if broker else "")
    kafka = KafkaSettings(bootstrap_servers=servers)
    prefix = f"bench{uuid.uuid4().hex[:6]}."
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        ensure_topics(
            servers,
            [
                TopicSpec(prefix + COMMANDS_TOPIC, 6, 1),
                TopicSpec(prefix + COMMAND_STATUS_TOPIC, 6, 1),
                TopicSpec(prefix + COMMAND_OWNERS_TOPIC, 6, 1, {"cleanup.policy": "compact"}),
                TopicSpec(COMMAND_REPORTS_TOPIC, 6, 1),
            ],
        )
        tokens = workdir / "tokens.yaml"
        tokens.write_text(_tokens(gateways))
        ingest_log = workdir / "ingest.log"
        ingest = _start_ingest(servers, port, prefix, tokens, ingest_log)
        try:
            # Gateways started before the server listens fail their first calls and
            # streams (connection refused), back off and log warnings no part of the figures.
            asyncio.run(processes.wait_serving(f"127.0.0.1:{port}", ingest, 60, ingest_log))
            result.update(
                asyncio.run(
                    _measure(kafka, prefix, f"127.0.0.1:{port}", workdir, ingest.pid, result)
                )
            )
        finally:
            ingest.terminate()
            ingest.wait(30)
            if broker is not None:
                broker.stop()
    result["book_10k"] = _book_memory()
    return result


async def _measure(
    kafka: KafkaSettings,
    prefix: str,
    target: str,
    workdir: Path,
    ingest_pid: int,
    result: dict[str, Any],
) -> dict[str, Any]:
    opts = result["options"]
    per_gateway = max(1, opts["devices"] // opts["gateways"])
    devices = [f"g{g}-d{d}" for d in range(per_gateway) for g in range(opts["gateways"])]
    stored: dict[str, float] = {}
    executed: dict[str, float] = {}
    stop = asyncio.Event()
    clients = asyncio.create_task(
        run_gateways(target, opts["gateways"], workdir, stored, executed, stop)
    )
    await asyncio.sleep(5.0)  # the server up, the streams open, the book caught up
    cpu_before = server_proc.cpu_seconds(ingest_pid)
    load_before = os.getloadavg()
    written: list[str] = []

    def writer() -> None:
        written.extend(
            write_commands(kafka, prefix + COMMANDS_TOPIC, devices, opts["rate"], opts["seconds"])
        )

    started = time.monotonic()
    await asyncio.to_thread(writer)
    write_s = time.monotonic() - started
    deadline = time.monotonic() + 60
    while len(executed) < len(written) and time.monotonic() < deadline:  # noqa: ASYNC110 - a dict filled by handlers
        await asyncio.sleep(0.2)
    await asyncio.sleep(3.0)  # the last reports out
    ingest_cpu = server_proc.cpu_seconds(ingest_pid) - cpu_before
    load_during = os.getloadavg()
    stop.set()
    await asyncio.wait_for(clients, 30)
    statuses = await asyncio.to_thread(read_statuses, kafka, prefix + COMMAND_STATUS_TOPIC)
    created = await asyncio.to_thread(_created_ms, kafka, prefix + COMMANDS_TOPIC)
    stored_s = [stored[i] - created[i] / 1000 for i in written if i in stored]
    delivered = CommandState.COMMAND_STATE_DELIVERED
    done = CommandState.COMMAND_STATE_EXECUTED
    delivered_s = [
        (statuses[(i, delivered)] - created[i]) / 1000
        for i in written
        if (i, delivered) in statuses
    ]
    executed_s = [
        (statuses[(i, done)] - created[i]) / 1000 for i in written if (i, done) in statuses
    ]

    def summary(latencies: list[float]) -> dict[str, Any]:
        return {
            "count": len(latencies),
            "p50_ms": percentile_ms(latencies, 0.5),
            "p99_ms": percentile_ms(latencies, 0.99),
            "max_ms": percentile_ms(latencies, 1.0),
        }

    return {
        "written": len(written),
        "write_rate_per_s": round(len(written) / write_s, 1),
        "stored": summary(stored_s),
        "delivered_written": summary(delivered_s),
        "executed_written": summary(executed_s),
        "ingest_cpu_s_per_1000_commands": round(ingest_cpu / max(1, len(written)) * 1000, 3),
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in load_during],
        "fresh_replica": await _catch_up_cost(kafka, prefix),
        "offline": (
            await command_offline.measure(kafka, prefix, target, workdir, devices, opts)
            if opts["offline_seconds"]
            else None
        ),
    }


def _created_ms(kafka: KafkaSettings, topic: str) -> dict[str, int]:
    from headwater_dev.devstack.readback import read_topic

    return {
        c.command_id: c.created_time.ToMilliseconds()
        for c in (
            Command.FromString(m.value() or b"") for m in read_topic(kafka, topic, timeout_s=120)
        )
    }


def main_cli(args: Any) -> int:
    """``headwater bench commands``: run and print the figures as JSON."""
    figures = run(
        args.rate,
        args.seconds,
        args.devices,
        args.gateways,
        args.bootstrap,
        args.offline_seconds,
        args.offline_rate,
    )
    print(json.dumps(figures, indent=2))
    return 0
