"""Start, wait for and stop the dev stack's pieces: shared by ``run`` and ``up``.

The broker is an :class:`~headwater_dev.devstack.broker.EmbeddedBroker`; the ingest service
and the enricher are ``headwater`` subprocesses, each logging to a file of its own.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from headwater.errors import HeadwaterError
from headwater.ingest.settings import IngestSettings
from headwater.kafka.admin import ensure_topics
from headwater.kafka.settings import KafkaSettings
from headwater.topics import all_topics

#: The dev stack lowers the payload limit so that oversized messages are cheap to make.
DEV_MAX_PAYLOAD_BYTES = 64 * 1024
#: ``python -m headwater.cli``: the services run with the interpreter of the caller.
CLI = [sys.executable, "-m", "headwater.cli"]
#: How much of a failed part's log a failure message carries: enough for a Python
#: traceback's end or the line that says which setting is wrong.
LOG_TAIL_LINES = 15


class PartFailedError(HeadwaterError, RuntimeError):
    """A piece of the stack exited or did not get ready; ``part`` names it, ``log`` its log."""

    def __init__(self, part: str, reason: str, log: Path) -> None:
        super().__init__(f"{reason}: see {log}")
        self.part = part
        self.log = log


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> list[str]:
    """The last ``lines`` non-empty lines of the log ``path`` (none if it is missing)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))  # a tail, not a whole multi-MB Spark log
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return []
    return [line for line in text.splitlines() if line.strip()][-lines:]


def exit_reason(code: int) -> str:
    """Say how a process ended: its exit code, or the signal that killed it."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


@dataclass(frozen=True)
class Ports:
    """The loopback ports of a dev stack's services."""

    kafka: int
    grpc: int
    ingest_metrics: int
    enricher_metrics: int


def service_env(
    bootstrap: str,
    ports: Ports,
    checkpoint: Path,
    tokens_file: Path,
    max_payload_bytes: int | None = None,
) -> dict[str, str]:
    """Return the environment of the ingest service and the enricher of a dev stack.

    ``checkpoint`` belongs to the broker's data: ``run`` keeps it in its temporary broker's
    folder, ``up`` beside the broker's data in the workdir (see ownership).
    """
    ingest = IngestSettings.variable
    env = {
        **os.environ,
        KafkaSettings.variable("bootstrap_servers"): bootstrap,
        ingest("listen_address"): f"127.0.0.1:{ports.grpc}",
        ingest("metrics_port"): str(ports.ingest_metrics),
        ingest("tokens_file"): str(tokens_file),
        # The enricher's settings are not declared on the settings base yet.
        "HEADWATER_ENRICHER_METRICS_PORT": str(ports.enricher_metrics),
        "HEADWATER_ENRICHER_CHECKPOINT_LOCATION": str(checkpoint),
        "HEADWATER_ENRICHER_STARTING_OFFSETS": "earliest",
    }
    if max_payload_bytes is not None:
        env[ingest("max_payload_bytes")] = str(max_payload_bytes)
    return env


def create_topics(bootstrap: str, brokers: int = 1) -> None:
    """Create every Headwater topic that is missing: 3 partitions, one replica per broker.

    On a cluster that is production's three replicas (the brokers add
    ``min.insync.replicas=2``: headwater_dev.devstack.cluster).
    """
    ensure_topics(bootstrap, all_topics(partitions=3, replication_factor=min(brokers, 3)))


def start_process(cmd: list[str], env: Mapping[str, str], log: Path) -> subprocess.Popen[bytes]:
    """Start ``cmd`` with its output appended to ``log`` and no standard input."""
    with open(log, "ab") as out:
        return subprocess.Popen(
            cmd, env=dict(env), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )


def start_ingest(env: Mapping[str, str], workdir: Path) -> subprocess.Popen[bytes]:
    """Start ``headwater ingest serve`` logging to ``<workdir>/ingest.log``."""
    return start_process([*CLI, "ingest", "serve"], env, workdir / "ingest.log")


def start_enricher(
    env: Mapping[str, str], workdir: Path, max_seconds: int | None = None
) -> subprocess.Popen[bytes]:
    """Start ``headwater enricher run`` logging to ``<workdir>/enricher.log``."""
    cmd = [*CLI, "enricher", "run"]
    if max_seconds is not None:
        cmd += ["--max-seconds", str(max_seconds)]
    return start_process(cmd, env, workdir / "enricher.log")


async def health_status(target: str, timeout_s: float = 1.0) -> str:
    """Return the gRPC health of ``target`` ("SERVING", "NOT_SERVING", or "UNREACHABLE")."""
    async with grpc.aio.insecure_channel(target) as channel:
        try:
            reply = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=timeout_s
            )
        except grpc.aio.AioRpcError:
            return "UNREACHABLE"
    return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))


async def wait_serving(
    target: str, proc: subprocess.Popen[bytes], within_s: float, log: Path
) -> None:
    """Wait until the ingest service at ``target`` reports SERVING.

    Raises:
        PartFailedError: the process exited, or it was not SERVING within ``within_s``.
    """
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise PartFailedError(
                "ingest", f"the ingest service {exit_reason(proc.returncode)}", log
            )
        if await health_status(target) == "SERVING":
            return
        await asyncio.sleep(0.2)
    raise PartFailedError("ingest", f"the ingest service was not SERVING after {within_s}s", log)


def last_commit(checkpoint: Path) -> int:
    """The newest micro-batch the checkpoint records as complete, -1 when none is."""
    try:
        names = [p.name for p in (checkpoint / "commits").iterdir()]
    except OSError:
        return -1
    return max((int(n) for n in names if n.isdigit()), default=-1)


async def wait_first_batch(
    checkpoint: Path,
    enricher: subprocess.Popen[bytes],
    within_s: float,
    log: Path,
    after: int = -1,
) -> None:
    """Wait until the enricher completed a micro-batch newer than ``after``.

    ``after`` is :func:`last_commit` before the enricher started: a reused checkpoint
    already holds commits, which say nothing about this process.

    Raises:
        PartFailedError: the enricher exited, or completed no micro-batch within ``within_s``.
    """
    deadline = time.monotonic() + within_s
    while last_commit(checkpoint) <= after:
        if enricher.poll() is not None:
            raise PartFailedError(
                "enricher", f"the enricher {exit_reason(enricher.returncode)}", log
            )
        if time.monotonic() > deadline:
            raise PartFailedError(
                "enricher", f"the enricher completed no micro-batch within {within_s}s", log
            )
        await asyncio.sleep(0.5)


def stop_process(proc: subprocess.Popen[bytes], timeout: float) -> None:
    """SIGTERM ``proc`` (our services drain on it), then SIGKILL after ``timeout`` seconds."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
