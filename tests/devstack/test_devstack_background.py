"""``headwater devstack up`` / ``status`` / ``down``: a stack that stays up, then stops cleanly.

Real processes throughout: ``up`` runs as a subprocess and returns while the stack keeps
running under a detached supervisor (its own session, so a closing terminal cannot reach
it); the ``buf curl`` call ``up`` prints is run as printed and its message is read back
from Kafka; ``down`` must stop every piece within its bound. ``--no-enricher`` keeps it to
seconds (the enricher's start is covered by the ``run`` pipeline test).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from headwater_dev.devstack import status_file
from headwater_dev.devstack.ports import free_port
from tests.support.launch import launch

CLI = [sys.executable, "-m", "headwater.cli", "devstack"]
UP_WITHIN_S = 120
DOWN_WITHIN_S = 60


def devstack(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture
def stack_dir(tmp_path: Path):
    """A workdir whose stack is always stopped after the test, even when it fails."""
    workdir = tmp_path / "stack"
    yield workdir
    left = status_file.read(workdir)
    if left is not None and status_file.alive(left.supervisor_pid):
        devstack("down", "--workdir", str(workdir), "--timeout", "30", timeout=90)


def test_up_status_down(stack_dir: Path):
    ports = [free_port() for _ in range(4)]
    flags = ["--workdir", str(stack_dir), "--no-enricher"]
    flags += ["--kafka-port", str(ports[0]), "--grpc-port", str(ports[1])]
    flags += ["--ingest-metrics-port", str(ports[2]), "--enricher-metrics-port", str(ports[3])]

    up = devstack("up", *flags, "--json", "--wait", str(UP_WITHIN_S), timeout=UP_WITHIN_S + 30)
    assert up.returncode == 0, up.stdout + up.stderr + _logs(stack_dir)
    info = json.loads(up.stdout.strip().splitlines()[-1])
    assert info["status"] == "up"
    assert info["grpc"] == f"127.0.0.1:{ports[1]}"
    assert info["kafka_bootstrap_servers"] == f"127.0.0.1:{ports[0]}"
    assert info["metrics"] == {"ingest": f"http://127.0.0.1:{ports[2]}/metrics"}
    assert info["token"] in (stack_dir / "gateway-token").read_text()

    # `up` has exited; the stack runs on in a session of its own (no controlling terminal
    # to send it SIGHUP), with its pieces recorded in the state file.
    current = status_file.read(stack_dir)
    assert current is not None and current.status == "up"
    supervisor = current.supervisor_pid
    assert status_file.alive(supervisor)
    assert os.getsid(supervisor) == supervisor != os.getsid(0)
    pieces = dict(current.pids)
    assert set(pieces) == {"broker", "ingest"}
    assert all(status_file.alive(pid) for pid in pieces.values())

    status = devstack("status", "--workdir", str(stack_dir), "--json")
    assert status.returncode == 0, status.stdout + status.stderr
    assert json.loads(status.stdout)["pieces"] == {"broker": "up", "ingest": "up"}

    # A second `up` reports the running stack instead of starting another.
    again = devstack("up", *flags, "--json", timeout=30)
    assert again.returncode == 0 and "already runs" in again.stdout
    # `make run` in the same folder would wipe a live stack: it refuses.
    run = devstack("run", "--workdir", str(stack_dir), "--no-enricher", "--duration", "1")
    assert run.returncode == 1 and "devstack down" in run.stdout

    # The printed `buf curl` call publishes as printed; the message is in the stack's Kafka.
    published = subprocess.run(
        info["buf_curl"], capture_output=True, text=True, timeout=30, check=False
    )
    assert published.returncode == 0, published.stderr
    (result,) = json.loads(published.stdout)["results"]
    assert result["code"] == 0 and result["messageId"] == "quickstart-1", result
    watched = devstack(
        "watch",
        "--workdir",
        str(stack_dir),
        "--topic",
        "ingest.telemetry.v1",
        "--from-beginning",
        "--max-records",
        "1",
        "--max-seconds",
        "20",
    )
    assert watched.returncode == 0, watched.stderr
    record = json.loads(watched.stdout.strip().splitlines()[-1])
    assert record["key"] == "demo-001" and record["value"]["messageId"] == "quickstart-1"
    assert (record["partition"], int(record["offset"])) == (
        result["partition"],
        int(result["offset"]),
    )

    started = time.monotonic()
    down = devstack("down", "--workdir", str(stack_dir), timeout=DOWN_WITHIN_S + 30)
    took = time.monotonic() - started
    assert down.returncode == 0, down.stdout + down.stderr
    assert "forced" not in down.stdout and took < DOWN_WITHIN_S
    for pid in [supervisor, *pieces.values()]:
        assert not status_file.alive(pid), f"pid {pid} still runs after down"
    assert status_file.read(stack_dir) is None
    # Stopped in order and cleanly: the ingest service drained.
    assert "ingest service stopped" in (stack_dir / "ingest.log").read_text()
    assert devstack("status", "--workdir", str(stack_dir)).returncode == 1
    assert devstack("down", "--workdir", str(stack_dir)).returncode == 0  # nothing to stop


def test_up_refuses_busy_ports_and_names_the_flag(stack_dir: Path):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        busy_port = holder.getsockname()[1]
        up = devstack(
            "up", "--workdir", str(stack_dir), "--no-enricher", "--kafka-port", str(busy_port)
        )
    assert up.returncode == 1
    assert f"{busy_port} (--kafka-port)" in up.stdout
    assert status_file.read(stack_dir) is None


def test_down_kills_pieces_left_by_a_killed_supervisor(stack_dir: Path):
    """A state file whose supervisor died: down cleans up and says so (no stray signals)."""
    stack_dir.mkdir()
    orphan = launch([sys.executable, "-c", "import time; time.sleep(60)", "headwater-orphan"])
    try:
        status_file.write(
            stack_dir,
            status_file.StackState(
                supervisor_pid=orphan.pid + 10_000_000,  # no such process
                workdir=str(stack_dir),
                ports={"kafka": 1, "grpc": 2, "ingest_metrics": 3, "enricher_metrics": 4},
                with_enricher=False,
                token="t",
                gateway_id="g",
                device_id="d",
                status="up",
                pids={"ingest": orphan.pid},
            ),
        )
        down = devstack("down", "--workdir", str(stack_dir))
        assert down.returncode == 1 and f"leftover ingest (pid {orphan.pid})" in down.stdout
        assert orphan.wait(10) == -9
        assert status_file.read(stack_dir) is None
    finally:
        if orphan.poll() is None:
            orphan.kill()
            orphan.wait(10)


def test_new_commands_have_help():
    for command in ("up", "down", "status", "serve", "watch"):
        shown = devstack(command, "--help")
        assert shown.returncode == 0 and f"headwater devstack {command}" in shown.stdout


def _logs(workdir: Path) -> str:
    out = []
    for name in ("supervisor.log", "ingest.log", "broker.log"):
        path = workdir / name
        if path.exists():
            out.append(f"--- {name}\n{path.read_text(errors='replace')[-2000:]}")
    return "\n".join(out)
