"""The ingest server under test, in its own process, with a choice of RecordWriter.

``python -m headwater.bench.server_proc --writer aiokafka|confluent`` builds the same
``IngestServer`` that ``headwater ingest serve`` runs (settings from the environment) and
serves until SIGTERM. Its own process, so the load generator never shares its GIL, and its
peak RSS (``VmHWM``) is the server's alone.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import subprocess
import sys

WRITERS = ("aiokafka", "confluent")


def start(bootstrap: str, port: int, writer: str = "aiokafka") -> subprocess.Popen[bytes]:
    """Start the ingest server on ``127.0.0.1:port`` (no auth, no metrics endpoint)."""
    env = {
        **os.environ,
        "HEADWATER_KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "HEADWATER_KAFKA_ENABLE_IDEMPOTENCE": "false",
        "HEADWATER_INGEST_LISTEN_ADDRESS": f"127.0.0.1:{port}",
        "HEADWATER_INGEST_METRICS_PORT": "0",
        "HEADWATER_INGEST_ALLOW_UNAUTHENTICATED": "true",
        "HEADWATER_LOG_LEVEL": "ERROR",
    }
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    return subprocess.Popen(
        [sys.executable, "-m", "headwater.bench.server_proc", "--writer", writer],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def status_mb(pid: int, name: str) -> float:
    """Return ``name`` (VmRSS, VmHWM) of a process from /proc, in MB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(name + ":"):
                return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def reset_peak(pid: int) -> bool:
    """Reset a process's peak RSS (VmHWM) to its current RSS; False where not allowed."""
    with contextlib.suppress(OSError), open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")
        return True
    return False


async def _serve(writer_name: str) -> None:
    from headwater.ingest.server import IngestServer
    from headwater.ingest.settings import IngestSettings
    from headwater.telemetry import create_telemetry

    settings = IngestSettings.from_env()
    writer = None
    if writer_name == "confluent":
        from headwater.ingest.confluent_writer import ConfluentWriter

        writer = ConfluentWriter(settings.kafka, settings.produce_timeout_seconds)
    telemetry = create_telemetry("headwater-ingest-bench", set_global=True)
    server = IngestServer(settings, writer=writer, telemetry=telemetry)
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop(grace_s=2.0)


def main() -> None:
    """Serve until SIGTERM."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--writer", choices=WRITERS, default="aiokafka")
    asyncio.run(_serve(parser.parse_args().writer))


if __name__ == "__main__":
    main()
