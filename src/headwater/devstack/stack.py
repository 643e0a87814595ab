"""The dev stack: embedded broker, topics, ingest service, enricher and a simulated fleet.

Everything runs on loopback, for a bounded time, and ends with a summary that checks the
central promise: every message answered OK is in Kafka.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from confluent_kafka import Producer
from grpc_health.v1 import health_pb2, health_pb2_grpc

from headwater.devstack.broker import EmbeddedBroker, free_port
from headwater.devstack.fleet import FleetStats, SimGateway, build_fleet, run_fleet
from headwater.devstack.readback import missing_acks, read_ingest
from headwater.devstack.summary import build_summary, read_enriched, render
from headwater.ingest.auth import hash_token
from headwater.kafka_admin import ensure_topics
from headwater.logs import JsonFormatter
from headwater.proto.master.v1 import device_master_pb2
from headwater.topics import INGEST_TOPICS, MASTER_DEVICES_TOPIC, all_topics

#: The dev stack lowers the payload limit so that oversized messages are cheap to make.
DEV_MAX_PAYLOAD_BYTES = 64 * 1024


@dataclass(frozen=True)
class DevStackOptions:
    """How big and how long a dev-stack run is."""

    duration_s: float = 60.0
    rate: float = 500.0
    gateways: int = 8
    devices_per_gateway: int = 25
    with_enricher: bool = True
    enricher_drain_s: float = 120.0
    workdir: Path = Path(".devstack")
    seed: int = 7
    json_output: bool = False


def _tokens_yaml(fleet: list[SimGateway]) -> str:
    lines = ["gateways:"]
    for gw in fleet:
        if gw.gateway_id == "gw-rogue":
            continue  # its token is unknown to the service on purpose
        lines += [
            f"  - id: {gw.gateway_id}",
            f"    tenant: {gw.tenant}",
            f"    token_sha256: {hash_token(gw.token)}",
            f'    devices: ["acme-{gw.gateway_id[3:]}-*"]',
        ]
    return "\n".join(lines) + "\n"


def _publish_master(bootstrap: str, fleet: list[SimGateway], late: bool) -> int:
    """Publish master data for the on-time devices, or for the late ones (every 10th)."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    count = 0
    for gw in fleet:
        for i, device in enumerate(gw.devices):
            if (i % 10 == 9) != late:
                continue
            master = device_master_pb2.DeviceMaster(
                device_id=device.device_id,
                site=f"plant-{gw.gateway_id[3:]}",
                area_code=f"A{i % 4}",
                vendor_format=device.content_type,
                model="sim-1",
            )
            producer.produce(MASTER_DEVICES_TOPIC, master.SerializeToString(), device.device_id)
            count += 1
    producer.flush(30)
    return count


def _start(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)


async def _wait_serving(target: str, proc: subprocess.Popen[bytes], within_s: float) -> None:
    deadline = time.monotonic() + within_s
    async with grpc.aio.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"ingest service exited with {proc.returncode}")
            try:
                reply = await stub.Check(health_pb2.HealthCheckRequest(), timeout=1)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.aio.AioRpcError:
                pass
            await asyncio.sleep(0.2)
    raise RuntimeError(f"ingest service not SERVING after {within_s}s")


async def _progress(stats: FleetStats, started: float, duration: float) -> None:
    tty = sys.stderr.isatty()
    last_acked, last_t = 0, started
    while True:
        await asyncio.sleep(1.0)
        now = time.monotonic()
        acked = len(stats.acked)
        rate = (acked - last_acked) / (now - last_t)
        last_acked, last_t = acked, now
        line = (
            f"[{now - started:5.0f}s/{duration:.0f}s] sent {stats.sent:>8} acked {acked:>8} "
            f"rejected {sum(stats.rejected.values()):>6}  {rate:8.0f} msg/s"
        )
        print(("\r" + line) if tty else line, end="" if tty else "\n", file=sys.stderr, flush=True)


async def run_devstack(opts: DevStackOptions) -> dict[str, Any]:
    """Run the whole pipeline once and return the summary."""
    workdir = opts.workdir.resolve()
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    rng = random.Random(opts.seed)
    fleet = build_fleet(opts.gateways, opts.devices_per_gateway, rng)
    (workdir / "tokens.yaml").write_text(_tokens_yaml(fleet))
    (workdir / "spools").mkdir()
    _log_gateways_to(workdir / "fleet.log")
    procs: list[subprocess.Popen[bytes]] = []
    with EmbeddedBroker(log_path=workdir / "broker.log") as broker:
        bootstrap = broker.bootstrap_servers
        ensure_topics(bootstrap, all_topics(partitions=3, replication_factor=1))
        _publish_master(bootstrap, fleet, late=False)
        port = free_port()
        env = {
            **os.environ,
            "HEADWATER_KAFKA_BOOTSTRAP_SERVERS": bootstrap,
            "HEADWATER_INGEST_LISTEN_ADDRESS": f"127.0.0.1:{port}",
            "HEADWATER_INGEST_METRICS_PORT": str(free_port()),
            "HEADWATER_ENRICHER_METRICS_PORT": str(free_port()),
            "HEADWATER_INGEST_TOKENS_FILE": str(workdir / "tokens.yaml"),
            "HEADWATER_INGEST_MAX_PAYLOAD_BYTES": str(DEV_MAX_PAYLOAD_BYTES),
            "HEADWATER_ENRICHER_CHECKPOINT_LOCATION": str(workdir / "checkpoint"),
            "HEADWATER_ENRICHER_STARTING_OFFSETS": "earliest",
        }
        cli = [sys.executable, "-m", "headwater.cli"]
        try:
            ingest = _start([*cli, "ingest", "serve"], env, workdir / "ingest.log")
            procs.append(ingest)
            target = f"127.0.0.1:{port}"
            await _wait_serving(target, ingest, within_s=30)
            enricher = None
            if opts.with_enricher:
                budget = opts.duration_s + opts.enricher_drain_s + 60
                enricher = _start(
                    [*cli, "enricher", "run", "--max-seconds", str(int(budget))],
                    env,
                    workdir / "enricher.log",
                )
                procs.append(enricher)
                # Traffic starts once the query runs (Spark takes tens of seconds to start):
                # latencies then measure the pipeline, and the late master data arrives after
                # the enricher has parked messages of those devices, so retries are exercised.
                print("starting the enricher (Spark)...", file=sys.stderr)
                await _wait_first_batch(workdir / "checkpoint", enricher, within_s=180)
            print(
                f"dev stack up: broker {bootstrap}, ingest {target}, "
                f"metrics http://127.0.0.1:{env['HEADWATER_INGEST_METRICS_PORT']}/metrics, "
                f"logs in {workdir}",
                file=sys.stderr,
            )
            stats = FleetStats()
            started = time.monotonic()
            progress = asyncio.create_task(_progress(stats, started, opts.duration_s))
            late_master = asyncio.get_running_loop().call_later(
                opts.duration_s / 2, _publish_master, bootstrap, fleet, True
            )
            await run_fleet(
                target,
                fleet,
                stats,
                opts.rate,
                opts.duration_s,
                DEV_MAX_PAYLOAD_BYTES,
                workdir / "spools",  # the gateways' spools, one SQLite file each
                opts.seed,
            )
            elapsed = time.monotonic() - started
            late_master.cancel()
            progress.cancel()
            print(file=sys.stderr)
            _save_scrape(env["HEADWATER_INGEST_METRICS_PORT"], workdir / "metrics-ingest.prom")
            _stop(ingest, timeout=30)
            _publish_master(bootstrap, fleet, late=True)
            readback = read_ingest(bootstrap, list(INGEST_TOPICS.values()))
            enriched = None
            if enricher is not None:
                enriched = await _wait_enriched(
                    bootstrap, readback, enricher, opts.enricher_drain_s
                )
                _save_scrape(
                    env["HEADWATER_ENRICHER_METRICS_PORT"], workdir / "metrics-enricher.prom"
                )
                _stop(enricher, timeout=60)
            summary = build_summary(
                stats, readback, missing_acks(stats.acked, readback), elapsed, enriched
            )
        finally:
            for proc in procs:
                _stop(proc, timeout=30)
    (workdir / "summary.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary) if opts.json_output else render(summary))
    return summary


async def _wait_enriched(
    bootstrap: str, readback: Any, enricher: subprocess.Popen[bytes], timeout_s: float
) -> Any:
    """Wait until every ingest record has a terminal completion, or the timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        enriched = read_enriched(bootstrap, readback.received_at_ms)
        left = len(set(readback.found) - enriched.terminal_message_ids)
        if left == 0 or time.monotonic() > deadline or enricher.poll() is not None:
            return enriched
        print(f"waiting for the enricher: {left} messages without completion", file=sys.stderr)
        await asyncio.sleep(3)


async def _wait_first_batch(
    checkpoint: Path, enricher: subprocess.Popen[bytes], within_s: float
) -> None:
    """Wait until the enricher committed its first micro-batch (the master data)."""
    deadline = time.monotonic() + within_s
    while not (checkpoint / "commits" / "0").exists():
        if enricher.poll() is not None:
            raise RuntimeError(f"enricher exited with {enricher.returncode}: see enricher.log")
        if time.monotonic() > deadline:
            raise RuntimeError(f"enricher ran no micro-batch within {within_s}s: see enricher.log")
        await asyncio.sleep(0.5)


def _log_gateways_to(path: Path) -> None:
    """Send the simulated gateways' logs to a file: the console keeps the progress line."""
    handler = logging.FileHandler(path)
    handler.setFormatter(JsonFormatter())
    gateway_log = logging.getLogger("headwater.gateway")
    gateway_log.handlers = [handler]
    gateway_log.propagate = False


def _save_scrape(port: str, path: Path) -> None:
    """Keep the last Prometheus scrape of a service in the workdir (what it exported)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
            path.write_bytes(reply.read())
    except OSError as exc:
        print(f"could not scrape http://127.0.0.1:{port}/metrics: {exc}", file=sys.stderr)


def _stop(proc: subprocess.Popen[bytes], timeout: float) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
