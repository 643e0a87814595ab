"""``headwater devstack up``, ``status`` and ``down``: a dev stack that stays up.

``up`` starts the supervisor (:mod:`headwater_dev.devstack.supervisor`) as a detached process
in a session of its own, waits until the state file says up or failed, and prints what a
user needs. ``down`` sends the supervisor SIGTERM and waits, bounded, for it to stop the
pieces. ``status`` checks each piece, not just the state file.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

from headwater_dev.devstack import status_file
from headwater_dev.devstack.connect import connection_info, connection_text
from headwater_dev.devstack.processes import CLI, Ports, exit_reason, health_status, log_tail
from headwater_dev.devstack.progress import ProgressLine
from headwater_dev.devstack.spark_cluster import DAEMON_MARKER

#: The command-line flag that changes each port, for error messages.
PORT_FLAGS = {
    "kafka": "--kafka-port",
    "grpc": "--grpc-port",
    "ingest_metrics": "--ingest-metrics-port",
    "enricher_metrics": "--enricher-metrics-port",
}
#: Markers of our processes' command lines (pids are reused after a crash).
_MARKERS = {"supervisor": "devstack", "ingest": "headwater", "enricher": "headwater"}
_BROKER_MARKER = "kafka.Kafka"


def _port_busy(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def up(
    workdir: Path,
    ports: Ports,
    with_enricher: bool,
    wait_s: float,
    as_json: bool,
    brokers: int = 1,
    spark_workers: int = 0,
) -> int:
    """Start a background dev stack in ``workdir`` and print how to use it.

    Returns:
        0 when the stack is up (or already was), 1 when it failed or is not up in time.
    """
    workdir = workdir.resolve()
    running = status_file.read(workdir)
    if running is not None and status_file.runs(running.supervisor_pid, _MARKERS["supervisor"]):
        print(f"a dev stack already runs in {workdir} ({running.status})")
        _print_info(running, as_json)
        return 0
    wanted = {"kafka": ports.kafka, "grpc": ports.grpc, "ingest_metrics": ports.ingest_metrics}
    if with_enricher:
        wanted["enricher_metrics"] = ports.enricher_metrics
    # A cluster's further nodes listen on the ports after --kafka-port.
    wanted |= {f"kafka-{i + 1}": ports.kafka + i for i in range(1, brokers)}
    busy = [
        f"{port} ({PORT_FLAGS[name.split('-')[0]]})"
        for name, port in wanted.items()
        if _port_busy(port)
    ]
    if busy:
        print(f"ports in use on 127.0.0.1: {', '.join(busy)}; choose others with those flags")
        return 1
    workdir.mkdir(parents=True, exist_ok=True)
    status_file.remove(workdir)  # a failed start's leftovers
    cmd = [*CLI, "devstack", "serve", "--workdir", str(workdir)]
    cmd += ["--kafka-port", str(ports.kafka), "--grpc-port", str(ports.grpc)]
    cmd += ["--ingest-metrics-port", str(ports.ingest_metrics)]
    cmd += ["--enricher-metrics-port", str(ports.enricher_metrics)]
    cmd += ["--brokers", str(brokers), "--spark-workers", str(spark_workers)]
    if not with_enricher:
        cmd.append("--no-enricher")
    with open(workdir / "supervisor.log", "ab") as out:
        # A session of its own: no controlling terminal, so closing the terminal (SIGHUP)
        # or a Ctrl-C meant for this command never reaches the stack. Spark's scratch
        # files (metastore_db, spark-warehouse) land in the workdir, not the user's folder.
        supervisor = subprocess.Popen(
            cmd,
            cwd=workdir,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return _wait_up(workdir, supervisor, wait_s, as_json)


def _wait_up(
    workdir: Path, supervisor: subprocess.Popen[bytes], wait_s: float, as_json: bool
) -> int:
    display = ProgressLine()
    deadline = time.monotonic() + wait_s
    started = time.monotonic()
    shown = ""
    while True:
        current = status_file.read(workdir)
        if current is not None and current.supervisor_pid == supervisor.pid:
            if current.status == "up":
                display.close()
                print(f"Headwater dev stack is up (supervisor pid {supervisor.pid})\n")
                _print_info(current, as_json)
                return 0
            if current.status == "failed":
                display.close()
                print(f"the dev stack failed to start: {current.error}")
                _print_failed_log(workdir, current.failed_part)
                print(f"see {workdir / 'supervisor.log'} and the logs beside it")
                return 1
            if display.tty or current.step != shown:  # in a log: one line per step
                display.update(f"[{time.monotonic() - started:4.0f}s] {current.step}...")
                shown = current.step
        code = supervisor.poll()
        if code is not None:
            display.close()
            print(f"the supervisor exited with code {code}: see {workdir / 'supervisor.log'}")
            return 1
        if time.monotonic() > deadline:
            display.close()
            print(
                f"not up after {wait_s:.0f}s; it keeps starting in the background: "
                f"`headwater devstack status --workdir {workdir}`, or `down` to stop it"
            )
            return 1
        time.sleep(0.5)


def _print_failed_log(workdir: Path, part: str | None) -> None:
    """Print the last lines of the failed piece's log: the reason is usually there."""
    if part is None:
        return
    path = workdir / f"{part}.log"
    lines = log_tail(path)
    if lines:
        print(f"last lines of {path}:")
        for line in lines:
            print(f"  {line}")


def _print_info(current: status_file.StackState, as_json: bool) -> None:
    if as_json:
        print(json.dumps(connection_info(current)))
    else:
        print(connection_text(current))


def down(workdir: Path, timeout_s: float) -> int:
    """Stop the dev stack in ``workdir``: SIGTERM to the supervisor, bounded wait.

    Returns:
        0 when it stopped (or nothing ran), 1 when pieces had to be killed.
    """
    workdir = workdir.resolve()
    current = status_file.read(workdir)
    if current is None:
        print(f"no dev stack runs in {workdir}")
        return 0
    pid = current.supervisor_pid
    forced = False
    if status_file.runs(pid, _MARKERS["supervisor"]):
        print(f"stopping the dev stack in {workdir} (supervisor pid {pid})...")
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while status_file.alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if status_file.alive(pid):
            print(f"the supervisor did not stop within {timeout_s:.0f}s: killing the stack")
            os.kill(pid, signal.SIGKILL)
            forced = True
    # After a crash or a kill, the pieces may outlive their supervisor.
    for name, child in current.pids.items():
        is_broker = name.startswith("broker")  # "broker", or "broker-<id>" of a cluster
        is_spark = name.startswith("spark-")  # "spark-master", "spark-worker-<n>"
        marker = _BROKER_MARKER if is_broker else _MARKERS.get(name, "headwater")
        if status_file.runs(child, DAEMON_MARKER if is_spark else marker):
            print(f"killing the leftover {name} (pid {child})")
            # A Spark daemon leads its process group: a worker's executors go with it.
            if is_spark:
                os.killpg(child, signal.SIGKILL)
            else:
                os.kill(child, signal.SIGKILL)
            forced = True
    status_file.remove(workdir)
    print("stopped" + (" (forced)" if forced else ""))
    return 1 if forced else 0


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            return bool(reply.status == 200)
    except OSError:
        return False


def _kafka_ok(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True
    except OSError:
        return False


def check(current: status_file.StackState) -> dict[str, str]:
    """Return each piece's condition: "up", or what is wrong with it."""
    pieces: dict[str, str] = {}
    for i in range(current.brokers):
        name = "broker" if current.brokers == 1 else f"broker-{i + 1}"
        broker_pid = current.pids.get(name)
        if broker_pid is not None and not status_file.alive(broker_pid):
            pieces[name] = "exited"
        else:
            pieces[name] = "up" if _kafka_ok(current.ports["kafka"] + i) else "unreachable"
    for name, pid in current.pids.items():
        if name.startswith("spark-"):  # a worker lost is not restarted: status says so
            pieces[name] = "up" if status_file.runs(pid, DAEMON_MARKER) else "exited"
    if "ingest" in current.pids:
        if "ingest" in current.exited:
            pieces["ingest"] = "exited"
        else:
            health = asyncio.run(health_status(current.grpc_target, timeout_s=2))
            pieces["ingest"] = "up" if health == "SERVING" else health.lower()
    if current.with_enricher and "enricher" in current.pids:
        if "enricher" in current.exited or not status_file.alive(current.pids["enricher"]):
            pieces["enricher"] = "exited"
        elif _http_ok(current.metrics_url("enricher")):
            pieces["enricher"] = "up"
        else:
            pieces["enricher"] = "starting"
    return pieces


def status(workdir: Path, as_json: bool) -> int:
    """Print what runs in ``workdir``.

    Returns:
        0 when every piece is up, 1 when no stack runs, 2 when it runs but a piece is not up.
    """
    workdir = workdir.resolve()
    current = status_file.read(workdir)
    if current is None or not status_file.runs(current.supervisor_pid, _MARKERS["supervisor"]):
        last = f" (the last start failed: {current.error})" if current and current.error else ""
        if as_json:
            print(json.dumps({"status": "not running", "error": current and current.error}))
        else:
            print(f"no dev stack runs in {workdir}{last}")
        return 1
    pieces = check(current) if current.status in ("up", "degraded") else {}
    healthy = current.status == "up" and all(v == "up" for v in pieces.values())
    if as_json:
        exits = {
            name: {"reason": exit_reason(code), "log": current.exit_logs.get(name, [])}
            for name, code in current.exited.items()
        }
        print(json.dumps({**connection_info(current), "pieces": pieces, "exited": exits}))
    else:
        doing = f" ({current.step})" if current.status not in ("up", "degraded") else ""
        print(f"dev stack in {workdir}: {current.status}{doing}")
        for name, condition in pieces.items():
            pid = current.pids.get(name, "-")
            print(f"  {name:<14} {condition:<12} pid {pid}")
        for name, code in current.exited.items():
            # Why it exited: how, and its log's last lines as the supervisor saw them.
            print(f"\n{name} {exit_reason(code)}; last lines of {workdir / (name + '.log')}:")
            for line in current.exit_logs.get(name, []):
                print(f"  {line}")
        print()
        print(connection_text(current))
    return 0 if healthy else 2
