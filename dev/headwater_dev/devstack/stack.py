"""The dev stack: embedded broker, topics, ingest service, enricher and a simulated fleet.

Everything runs on loopback, for a bounded time, and ends with a summary that checks the
central promise: every message answered OK is in Kafka.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import shutil
import subprocess
import sys
import time
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from headwater.proto.master.v1 import device_master_pb2
from headwater.runtime.logs import JsonFormatter
from headwater.topics import INGEST_TOPICS
from headwater_dev.devstack import edge_gateway, seeding, status_file
from headwater_dev.devstack.cluster import BrokerCluster, dev_kafka
from headwater_dev.devstack.commands import CommandTally, command_states, send_now_and_then
from headwater_dev.devstack.fleet import FleetStats, SimGateway, build_fleet, run_fleet
from headwater_dev.devstack.ports import free_port
from headwater_dev.devstack.processes import (
    DEV_MAX_PAYLOAD_BYTES,
    Ports,
    create_topics,
    service_env,
    start_enricher,
    start_ingest,
    stop_process,
    wait_first_batch,
    wait_serving,
)
from headwater_dev.devstack.progress import ProgressLine
from headwater_dev.devstack.readback import missing_acks, read_ingest
from headwater_dev.devstack.run_faults import fault_start_s, provoke
from headwater_dev.devstack.spark_cluster import SparkStandalone
from headwater_dev.devstack.summary import (
    build_summary,
    connector_summary,
    p99_back_under_s,
    p99_before_ms,
    read_enriched,
    render,
)


@dataclass(frozen=True)
class DevStackOptions:
    """How big and how long a dev-stack run is."""

    duration_s: float = 60.0
    rate: float = 500.0
    gateways: int = 8
    devices_per_gateway: int = 25
    with_enricher: bool = True
    enricher_drain_s: float = 120.0
    #: Apart from ``up``'s folder (``.devstack``): a run never touches a background stack's
    #: broker data, token or checkpoint, and wipes only its own folder.
    workdir: Path = Path(".devstack/run")
    seed: int = 7
    json_output: bool = False
    #: 1: the embedded broker; 3: a cluster with production's replication (RF 3, min ISR 2).
    brokers: int = 1
    #: A fault mid-run (needs brokers >= 3): "leader", the telemetry topic's leader killed
    #: halfway; "roll", a rolling restart of every node after the warm-up; None: none.
    chaos: str | None = None
    #: 0: the enricher in Spark's local mode; N: on a standalone cluster of N workers.
    spark_workers: int = 0
    #: One device of each gateway connector (MQTT, OPC UA, Modbus) behind one
    #: ``headwater gateway run`` (headwater_dev.devstack.edge_gateway).
    connectors: bool = False
    #: Seconds of traffic at the start whose messages are left out of the end-to-end latency:
    #: Spark's JIT compiles the query's code in them (a cold JVM's first batches are slow).
    warmup_s: float = 20.0

    @property
    def latency_warmup_s(self) -> float:
        """The warm-up applied: none when it would leave less than half the run measured."""
        return self.warmup_s if self.duration_s >= 2 * self.warmup_s else 0.0


def _tokens_yaml(fleet: list[SimGateway], edge_token: str | None) -> str:
    entries = [
        seeding.GatewayEntry(gw.gateway_id, gw.tenant, gw.token, (f"acme-{gw.gateway_id[3:]}-*",))
        for gw in fleet
        if gw.gateway_id != "gw-rogue"  # its token is unknown to the service on purpose
    ]
    if edge_token is not None:
        entries.append(edge_gateway.gateway_entry(edge_token))
    return seeding.tokens_yaml(entries)


def _publish_master(bootstrap: str, fleet: list[SimGateway], late: bool) -> int:
    """Publish master data for the on-time devices, or for the late ones (every 10th).

    Written with ``headwater master``'s own functions, as an operator's load would be.
    """
    records = [
        device_master_pb2.DeviceMaster(
            device_id=device.device_id,
            site=f"plant-{gw.gateway_id[3:]}",
            area_code=f"A{i % 4}",
            vendor_format=device.content_type,
            model="sim-1",
            tenant=gw.tenant,
        )
        for gw in fleet
        for i, device in enumerate(gw.devices)
        if (i % 10 == 9) == late
    ]
    return seeding.publish_master(bootstrap, records)


async def _progress(
    stats: FleetStats, started: float, duration: float, display: ProgressLine
) -> None:
    last_acked, last_t = 0, started
    while True:
        await asyncio.sleep(1.0)
        now = time.monotonic()
        acked = len(stats.acked)
        rate = (acked - last_acked) / (now - last_t)
        last_acked, last_t = acked, now
        display.update(
            f"[{now - started:5.0f}s/{duration:.0f}s] sent {stats.sent:>8} acked {acked:>8} "
            f"rejected {sum(stats.rejected.values()):>6}  {rate:8.0f} msg/s"
        )


async def run_devstack(opts: DevStackOptions) -> dict[str, Any]:
    """Run the whole pipeline once and return the summary.

    Raises:
        StackRunningError: a background stack (``headwater devstack up``) runs in the
            workdir (this run would wipe it).
    """
    workdir = opts.workdir.resolve()
    running = status_file.read(workdir)
    if running is not None and status_file.alive(running.supervisor_pid):
        raise status_file.StackRunningError(
            f"a background dev stack runs in {workdir} (pid {running.supervisor_pid}): stop it "
            "with `headwater devstack down`, or give this run another --workdir"
        )
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    rng = random.Random(opts.seed)
    fleet = build_fleet(opts.gateways, opts.devices_per_gateway, rng)
    edge_token = uuid.uuid4().hex if opts.connectors else None
    (workdir / "tokens.yaml").write_text(_tokens_yaml(fleet, edge_token))
    (workdir / "spools").mkdir()
    _log_gateways_to(workdir / "fleet.log")
    display = ProgressLine()
    procs: list[subprocess.Popen[bytes]] = []
    with contextlib.ExitStack() as parts:
        broker = dev_kafka(opts.brokers, None, workdir, None)
        parts.enter_context(broker)  # started here, stopped last
        spark = (
            parts.enter_context(SparkStandalone(opts.spark_workers, log_dir=workdir))
            if opts.spark_workers and opts.with_enricher
            else None
        )
        bootstrap = broker.bootstrap_servers
        create_topics(bootstrap, opts.brokers)
        _publish_master(bootstrap, fleet, late=False)
        if opts.connectors:
            seeding.publish_master(bootstrap, edge_gateway.master_records())
        ports = Ports(broker.port, free_port(), free_port(), free_port())
        # The checkpoint lives and dies with the temporary broker's data (removed when the
        # broker stops): its offsets mean nothing against any other broker.
        checkpoint = broker.data_dir / "enricher-checkpoint"
        env = service_env(
            bootstrap, ports, checkpoint, workdir / "tokens.yaml", DEV_MAX_PAYLOAD_BYTES
        )
        if spark is not None:
            env |= spark.driver_env()
        target = f"127.0.0.1:{ports.grpc}"
        edge = None
        try:
            ingest = start_ingest(env, workdir)
            procs.append(ingest)
            await wait_serving(target, ingest, 30, workdir / "ingest.log")
            enricher = None
            if opts.with_enricher:
                budget = opts.duration_s + opts.enricher_drain_s + 60
                enricher = start_enricher(env, workdir, max_seconds=int(budget))
                procs.append(enricher)
                # Traffic starts once the query runs (Spark takes tens of seconds to start):
                # latencies then measure the pipeline, and the late master data arrives after
                # the enricher has parked messages of those devices, so retries are exercised.
                display.message("starting the enricher (Spark)...")
                # On a cluster the executors start after the driver, each a JVM of its own.
                first_batch_s = 180 if spark is None else 300
                await wait_first_batch(
                    checkpoint, enricher, first_batch_s, workdir / "enricher.log"
                )
            on_spark = f", Spark {spark.master_url}" if spark else ""
            display.message(
                f"dev stack up: broker {bootstrap}, ingest {target}{on_spark}, "
                f"metrics http://127.0.0.1:{ports.ingest_metrics}/metrics, logs in {workdir}"
            )
            if edge_token is not None:
                edge = edge_gateway.EdgeGateway(workdir, target, edge_token, opts.seed)
                await edge.start()
            stats = FleetStats()
            started = time.monotonic()
            measured_from_ms = int((time.time() + opts.latency_warmup_s) * 1000)
            progress = asyncio.create_task(_progress(stats, started, opts.duration_s, display))
            late_master = asyncio.get_running_loop().call_later(
                opts.duration_s / 2, _publish_master, bootstrap, fleet, True
            )
            tally = CommandTally()
            commanding = asyncio.create_task(
                send_now_and_then(
                    bootstrap,
                    [
                        (gw.tenant, d.device_id)
                        for gw in fleet
                        if gw.gateway_id != "gw-rogue"
                        for d in gw.devices
                    ],
                    tally,
                    started + opts.duration_s,
                    random.Random(opts.seed),
                )
            )
            chaos = (
                asyncio.create_task(
                    provoke(
                        opts.chaos,
                        broker,
                        fault_start_s(opts.chaos, opts.duration_s, opts.latency_warmup_s),
                        display,
                    )
                )
                if opts.chaos and isinstance(broker, BrokerCluster)
                else None
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
            edge_figures = await edge.stop() if edge is not None else None
            fault = await chaos if chaos is not None else None
            await commanding
            late_master.cancel()
            progress.cancel()
            display.close()
            _save_scrape(ports.ingest_metrics, workdir / "metrics-ingest.prom")
            stop_process(ingest, timeout=30)
            _publish_master(bootstrap, fleet, late=True)
            readback = read_ingest(bootstrap, list(INGEST_TOPICS.values()))
            enriched = None
            if enricher is not None:
                enriched = await _wait_enriched(
                    bootstrap, readback, enricher, opts.enricher_drain_s, display, measured_from_ms
                )
                display.close()
                _save_scrape(ports.enricher_metrics, workdir / "metrics-enricher.prom")
                stop_process(enricher, timeout=60)
            summary = build_summary(
                stats,
                readback,
                missing_acks(stats.acked, readback),
                elapsed,
                enriched,
                opts.latency_warmup_s,
            )
            if fault is not None and enriched is not None:
                fault["p99_before_ms"] = p99_before_ms(enriched, fault["at_ms"])
                fault["p99_back_under_2s_s"] = p99_back_under_s(enriched, fault["at_ms"])
            summary["kafka"] = {"brokers": opts.brokers, "fault": fault}
            if edge_figures is not None:
                summary["connectors"] = connector_summary(
                    {name: device for name, (device, _) in edge_gateway.DEVICES.items()},
                    edge_figures.spooled,
                    edge_figures.left_out,
                    readback,
                    enriched,
                )
            if enriched is not None:
                summary["spark"] = {"master": spark.master_url if spark else "local[*]"}
            summary["commands"] = {
                "sent": len(tally.sent),
                "refused": dict(tally.refused),
                "states": command_states(bootstrap, tally.sent),
            }
        finally:
            display.close()
            if edge is not None:
                await edge.close()
            for proc in procs:
                stop_process(proc, timeout=30)
    (workdir / "summary.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary) if opts.json_output else render(summary))
    return summary


async def _wait_enriched(
    bootstrap: str,
    readback: Any,
    enricher: subprocess.Popen[bytes],
    timeout_s: float,
    display: ProgressLine,
    measured_from_ms: int,
) -> Any:
    """Wait until every ingest record has a terminal completion, or the timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        enriched = read_enriched(bootstrap, readback.received_at_ms, measured_from_ms)
        left = len(set(readback.found) - enriched.terminal_message_ids)
        if left == 0 or time.monotonic() > deadline or enricher.poll() is not None:
            return enriched
        display.update(f"waiting for the enricher: {left} messages without completion")
        await asyncio.sleep(3)


def _log_gateways_to(path: Path) -> None:
    """Send the simulated gateways' logs to a file: the console keeps the progress line."""
    handler = logging.FileHandler(path)
    handler.setFormatter(JsonFormatter())
    gateway_log = logging.getLogger("headwater.gateway")
    gateway_log.handlers = [handler]
    gateway_log.propagate = False


def _save_scrape(port: int, path: Path) -> None:
    """Keep the last Prometheus scrape of a service in the workdir (what it exported)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
            path.write_bytes(reply.read())
    except OSError as exc:
        print(f"could not scrape http://127.0.0.1:{port}/metrics: {exc}", file=sys.stderr)
