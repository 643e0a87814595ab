"""The ingest server under test, in its own process, with a choice of produce client.

``python -m headwater_dev.bench.server_proc --writer confluent|aiokafka`` builds the same
``IngestServer`` that ``headwater ingest serve`` runs (settings from the environment) and
serves until SIGTERM. Its own process, so the load generator never shares its GIL, and its
peak RSS (``VmHWM``) is the server's alone.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping

from headwater.ingest import event_loop
from headwater.ingest.settings import PRODUCERS, IngestSettings
from headwater.kafka.settings import KafkaSettings
from headwater.runtime.logs import LogSettings


def start(
    bootstrap: str,
    port: int,
    writer: str = PRODUCERS[0],
    extra_env: Mapping[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """Start the ingest server on ``127.0.0.1:port`` (no metrics endpoint).

    Calls without credentials are accepted; ``extra_env`` adds settings (e.g. a tokens
    file, so some callers are gateways with their own limits).
    """
    ingest = IngestSettings.variable
    env = {
        **os.environ,
        KafkaSettings.variable("bootstrap_servers"): bootstrap,
        ingest("listen_address"): f"127.0.0.1:{port}",
        ingest("metrics_port"): "0",
        ingest("allow_unauthenticated"): "true",
        LogSettings.variable("log_level"): "ERROR",
        ingest("producer"): writer,
        **(extra_env or {}),
    }
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    return subprocess.Popen(
        [sys.executable, "-m", "headwater_dev.bench.server_proc"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


@contextlib.contextmanager
def serving(bootstrap: str | None, replicas: int = 1) -> Iterator[tuple[str, str]]:
    """Serve ingest on a broker for a benchmark; both stopped after.

    The broker is embedded unless ``bootstrap`` is given; the ingest topics are made (3
    partitions, ``replicas`` copies each), and the ingest server runs in a process of its
    own. Yields (its target, "given" or "embedded").
    """
    from headwater.kafka.admin import ensure_topics
    from headwater.topics import INGEST_TOPICS, TopicSpec
    from headwater_dev.devstack.broker import EmbeddedBroker
    from headwater_dev.devstack.ports import free_port

    broker = None if bootstrap else EmbeddedBroker().start()
    servers = bootstrap or (broker.bootstrap_servers if broker else "")
    port = free_port()
    ingest = start(servers, port)
    try:
        ensure_topics(servers, [TopicSpec(t, 3, replicas) for t in INGEST_TOPICS.values()])
        yield f"127.0.0.1:{port}", "given" if bootstrap else "embedded"
    finally:
        ingest.terminate()
        ingest.wait(30)
        if broker is not None:
            broker.stop()


def status_mb(pid: int, name: str) -> float:
    """Return ``name`` (VmRSS, VmHWM) of a process from /proc, in MB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(name + ":"):
                return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) a process has used so far, in seconds."""
    return stat_cpu_seconds(stat_fields(pid))


def cpu_snapshot(pids: Mapping[str, int | None]) -> dict[str, float | None]:
    """``cpu_seconds`` of each named process now; None for one without a pid here."""
    return {name: None if pid is None else cpu_seconds(pid) for name, pid in pids.items()}


def stat_fields(pid: int) -> list[str]:
    """The fields of ``/proc/<pid>/stat`` after the command name: [0] is field 3 (state)."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()


def stat_cpu_seconds(fields: list[str]) -> float:
    """CPU seconds of ``stat_fields``: utime and stime, fields 14 and 15 of stat(5)."""
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def reset_peak(pid: int) -> bool:
    """Reset a process's peak RSS (VmHWM) to its current RSS; False where not allowed."""
    with contextlib.suppress(OSError), open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")
        return True
    return False


async def _serve(settings: IngestSettings) -> None:
    from headwater.ingest.rpc.server import TRACE_RATIO, IngestServer, freeze_startup_heap
    from headwater.runtime.signals import async_stop_event
    from headwater.runtime.telemetry import create_telemetry

    # The service's own sampling default, so the bench measures what ships.
    telemetry = create_telemetry("headwater-ingest-bench", set_global=True, trace_ratio=TRACE_RATIO)
    server = IngestServer(settings, telemetry=telemetry)
    await server.start()
    freeze_startup_heap()  # as serve() does
    stop = async_stop_event()  # SIGINT or SIGTERM, whatever was inherited
    await stop.wait()
    await server.stop(grace_s=2.0)


def main() -> None:
    """Serve until SIGTERM (settings, produce client and event loop from the environment)."""
    argparse.ArgumentParser(description=__doc__).parse_args()
    settings = IngestSettings.from_env()
    event_loop.run(_serve(settings), settings.event_loop)


if __name__ == "__main__":
    main()
