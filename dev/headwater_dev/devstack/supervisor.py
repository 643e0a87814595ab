"""The dev stack supervisor: owns the broker, ingest and enricher until SIGTERM.

``headwater devstack up`` starts it as a detached process (a session of its own, so closing
the terminal does not stop it); ``headwater devstack serve`` runs it in the foreground.
It records every step in the state file, watches the pieces while they run, and on SIGTERM
or SIGINT stops the enricher, drains the ingest service, then stops the broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import subprocess
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from headwater.kafka.admin import ensure_topics
from headwater.proto.master.v1 import device_master_pb2
from headwater.runtime.signals import async_stop_event
from headwater.subscriber.settings import SubscriberSettings
from headwater.topics import TopicSpec
from headwater_dev.devstack import ownership, seeding, status_file
from headwater_dev.devstack.cluster import BrokerCluster, DevKafka, broker_pids, dev_kafka
from headwater_dev.devstack.processes import (
    PartFailedError,
    Ports,
    create_topics,
    exit_reason,
    last_commit,
    log_tail,
    service_env,
    start_enricher,
    start_ingest,
    stop_process,
    wait_first_batch,
    wait_serving,
)
from headwater_dev.devstack.spark_cluster import SparkStandalone
from headwater_dev.devstack.vendors import ACME_TELEMETRY

log = logging.getLogger(__name__)
T = TypeVar("T")

GATEWAY_ID = "dev-gateway"
DEMO_DEVICE = "demo-001"
#: The tenant the generated tokens file binds the demo gateway to.
DEMO_TENANT = "dev"
#: The consumer group of docs/quickstart.md's subscriber example. A subscriber refuses to
#: start without its dead-letter topic (on a real cluster an operator creates it), so the
#: dev stack creates this one, as it publishes the demo device's master data.
DEMO_SUBSCRIBER_GROUP = "quickstart"
#: Spark needs tens of seconds to start on a small machine, more on a first run.
ENRICHER_START_S = 300.0
INGEST_START_S = 60.0


@dataclass(frozen=True)
class StackOptions:
    """Where a background stack keeps its files, its ports, and whether Spark runs."""

    workdir: Path
    ports: Ports
    with_enricher: bool = True
    #: 1: the embedded broker; 3: a cluster on ports.kafka, +1, +2 (production's replication).
    brokers: int = 1
    #: 0: the enricher in Spark's local mode; N: on a standalone cluster of N workers.
    spark_workers: int = 0


class _Stopped(Exception):
    """SIGTERM or SIGINT arrived while starting."""


def _token(workdir: Path) -> str:
    """The dev gateway's bearer token: kept across restarts, so copied commands still work."""
    path = workdir / "gateway-token"
    if path.exists():
        return path.read_text().strip()
    token = secrets.token_urlsafe(24)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(token + "\n")
    return token


def _tokens_yaml(token: str) -> str:
    return seeding.tokens_yaml(
        [seeding.GatewayEntry(GATEWAY_ID, DEMO_TENANT, token, ("*",))],
        comment="Written by headwater devstack up: one gateway that may publish for any device.",
    )


def _publish_demo_master(bootstrap: str) -> None:
    """Master data for the demo device, so that its messages are enriched."""
    master = device_master_pb2.DeviceMaster(
        device_id=DEMO_DEVICE,
        site="plant-dev",
        area_code="A0",
        vendor_format=ACME_TELEMETRY,
        model="sim-1",
        tenant=DEMO_TENANT,
    )
    seeding.publish_master(bootstrap, [master])


def _create_demo_dead_letter_topic(bootstrap: str) -> None:
    """The dead-letter topic of the quickstart's subscriber group (see DEMO_SUBSCRIBER_GROUP)."""
    name = SubscriberSettings(group_id=DEMO_SUBSCRIBER_GROUP).dead_letter
    ensure_topics(bootstrap, [TopicSpec(name, partitions=1, replication_factor=1)])


async def _unless_stopped(work: Awaitable[T], stop: asyncio.Event) -> T:
    """Await ``work``; raise :class:`_Stopped` (cancelling it) if a stop signal comes first."""
    task = asyncio.ensure_future(work)
    stopper = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait([task, stopper], return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()
    if not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        raise _Stopped
    return task.result()


async def _in_thread(work: Callable[[], object], stop: asyncio.Event) -> None:
    """Run blocking ``work`` to its end (it is bounded), then honour a stop that came meanwhile.

    A thread cannot be cancelled: abandoning it would let it run on beside the teardown
    (a broker still starting while it is being stopped).
    """
    await asyncio.to_thread(work)
    if stop.is_set():
        raise _Stopped


class Supervisor:
    """One background dev stack: start, watch, stop."""

    def __init__(self, opts: StackOptions) -> None:
        self.opts = opts
        self.workdir = opts.workdir.resolve()
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.broker: DevKafka | None = None
        self.spark: SparkStandalone | None = None
        self.state: status_file.StackState | None = None

    def _save(self, **changes: object) -> None:
        assert self.state is not None
        for key, value in changes.items():
            setattr(self.state, key, value)
        status_file.write(self.workdir, self.state)
        if "step" in changes:
            log.info(str(changes["step"]))

    async def run(self) -> int:
        """Start everything, run until SIGTERM/SIGINT, stop everything; 1 if start failed."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        stop = async_stop_event()  # SIGINT or SIGTERM, whatever was inherited
        token = _token(self.workdir)
        (self.workdir / "tokens.yaml").write_text(_tokens_yaml(token))
        ports = self.opts.ports
        self.state = status_file.StackState(
            supervisor_pid=os.getpid(),
            workdir=str(self.workdir),
            ports={
                "kafka": ports.kafka,
                "grpc": ports.grpc,
                "ingest_metrics": ports.ingest_metrics,
                "enricher_metrics": ports.enricher_metrics,
            },
            with_enricher=self.opts.with_enricher,
            brokers=self.opts.brokers,
            token=token,
            gateway_id=GATEWAY_ID,
            device_id=DEMO_DEVICE,
        )
        failed = False
        try:
            await self._start(stop)
            self._save(status="up", step="up")
            await self._watch(stop)
        except _Stopped:
            log.info("stop requested while starting")
        except (PartFailedError, ownership.CheckpointMismatchError) as exc:
            # Expected failures: their message says what happened and what to do.
            failed = True
            log.error("dev stack failed to start: %s", exc)
            part = exc.part if isinstance(exc, PartFailedError) else None
            self._save(status="failed", error=str(exc), failed_part=part)
        except Exception as exc:
            failed = True
            log.exception("dev stack failed to start")
            self._save(status="failed", error=f"{type(exc).__name__}: {exc}")
        finally:
            if not failed:
                self._save(status="stopping", step="stopping")
            self._stop_all()
        if not failed:
            status_file.remove(self.workdir)
        log.info("dev stack stopped")
        return 1 if failed else 0

    async def _start(self, stop: asyncio.Event) -> None:
        ports, workdir = self.opts.ports, self.workdir
        checkpoint = workdir / "checkpoint"
        self._save(step="starting the Kafka broker")
        # A cluster's data apart from the single broker's: the enricher's checkpoint is
        # claimed by one of them (ownership), and their offsets differ.
        brokers = self.opts.brokers
        data = workdir / ("kafka" if brokers == 1 else f"kafka-{brokers}-nodes")
        self.broker = dev_kafka(brokers, ports.kafka, workdir, data)
        await _in_thread(self.broker.start, stop)
        self._save(pids=self._pids())
        if self.opts.with_enricher:
            # Before the enricher reads it: its offsets must be this broker's data's.
            claimed = ownership.claim(checkpoint, data)
            log.info("enricher checkpoint %s: %s", checkpoint, claimed)
        bootstrap = self.broker.bootstrap_servers
        self._save(step="creating topics and the demo device's master data")
        await _in_thread(lambda: create_topics(bootstrap, self.opts.brokers), stop)
        await _in_thread(lambda: _create_demo_dead_letter_topic(bootstrap), stop)
        await _in_thread(lambda: _publish_demo_master(bootstrap), stop)
        env = service_env(bootstrap, ports, checkpoint, workdir / "tokens.yaml")
        self._save(step="starting the ingest service")
        self.procs["ingest"] = start_ingest(env, workdir)
        self._save(pids=self._pids())
        target = f"127.0.0.1:{ports.grpc}"
        await _unless_stopped(
            wait_serving(target, self.procs["ingest"], INGEST_START_S, workdir / "ingest.log"),
            stop,
        )
        if self.opts.with_enricher:
            # Up means the enricher completed a micro-batch of its own, not that an earlier
            # run's commits are on disk. One always comes: the demo master record published
            # above is new data on a topic the enricher reads.
            before = last_commit(checkpoint)
            if self.opts.spark_workers:
                self._save(step="starting the Spark standalone cluster")
                self.spark = SparkStandalone(
                    self.opts.spark_workers, base_dir=workdir / "spark", log_dir=workdir
                )
                await _in_thread(self.spark.start, stop)
                self._save(pids=self._pids())
                env |= self.spark.driver_env()
            self._save(step="starting the enricher (Spark takes a while)")
            self.procs["enricher"] = start_enricher(env, workdir)
            self._save(pids=self._pids())
            await _unless_stopped(
                wait_first_batch(
                    checkpoint,
                    self.procs["enricher"],
                    ENRICHER_START_S,
                    workdir / "enricher.log",
                    after=before,
                ),
                stop,
            )

    def _pids(self) -> dict[str, int]:
        pids = {name: proc.pid for name, proc in self.procs.items()}
        if self.broker is not None:
            pids |= broker_pids(self.broker)
        if self.spark is not None:
            pids |= self.spark.pids()
        return pids

    async def _watch(self, stop: asyncio.Event) -> None:
        """Until stopped: record a piece that exits (status then says degraded)."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)
            assert self.state is not None
            await asyncio.to_thread(self._restart_lost_brokers)
            for name, proc in self.procs.items():
                code = proc.poll()
                if code is not None and name not in self.state.exited:
                    log.error("%s %s: see %s.log", name, exit_reason(code), name)
                    # Why, for `status`: its log's last lines, read while they are fresh.
                    tail = log_tail(self.workdir / f"{name}.log")
                    self._save(
                        status="degraded",
                        exited={**self.state.exited, name: code},
                        exit_logs={**self.state.exit_logs, name: tail},
                    )

    def _restart_lost_brokers(self) -> None:
        """Start a cluster node that exited (killed, or stopped by ``headwater chaos``) again.

        What Kubernetes does for a Strimzi broker pod: the node rejoins with its data and
        catches up; its partitions lead again after the next preferred-leader election.
        A single broker is left alone: nothing could take over meanwhile, so its exit is
        reported (status says degraded) instead of hidden.
        """
        if not isinstance(self.broker, BrokerCluster):
            return
        for node in self.broker.nodes:
            if node.exited():
                log.warning("Kafka node %s exited; starting it again with its data", node.node_id)
                node.kill()  # reaps the exited process
                node.start(wait=False)
                self._save(pids=self._pids())

    def _stop_all(self) -> None:
        """Enricher and its Spark cluster first (they use Kafka), ingest next, broker last."""
        if "enricher" in self.procs:
            stop_process(self.procs["enricher"], timeout=60)
        if self.spark is not None:
            self.spark.stop()  # its workers' executors with them
        if "ingest" in self.procs:
            stop_process(self.procs["ingest"], timeout=40)  # drain grace (20 s) and a flush
        if self.broker is not None:
            self.broker.stop()
