"""``headwater gateway run`` in its own process, pinned to one CPU, watched through its health.

The benchmark measures one gateway process on one core, so the process is started under
``taskset -c <cpu>`` (which execs it: the pid is the gateway's, and every thread it
starts inherits the affinity). Progress is read from ``GET /health``: the connector's
values spooled and the spool's counters, ``delivered`` being what ingest acknowledged.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from headwater_dev.bench import server_proc
from headwater_dev.devstack.ports import free_port
from headwater_dev.edge.gateway_health import read_health


def last_cpu() -> int:
    """The highest CPU this process may run on: the gateway's core."""
    return max(os.sched_getaffinity(0))


class PinnedGateway:
    """One gateway process with ``connectors``, its spool and log in ``workdir``."""

    def __init__(self, workdir: Path, target: str, connectors: list[dict[str, Any]], cpu: int):
        self.workdir = workdir
        self.cpu = cpu
        self.health_port = free_port()
        workdir.mkdir(parents=True, exist_ok=True)
        self.config = workdir / "gateway.yaml"
        doc = {
            "ingest": {"target": target},
            "spool": {"path": str(workdir / "spool.db")},
            "health": {"listen": f"127.0.0.1:{self.health_port}", "log_every_s": 0},
            "connectors": connectors,
        }
        self.config.write_text(yaml.safe_dump(doc))
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start the process on its CPU (its log goes to ``gateway.log``)."""
        command = [sys.executable, "-m", "headwater.cli", "gateway", "run", "--config"]
        self._proc = subprocess.Popen(
            ["taskset", "-c", str(self.cpu), *command, str(self.config)],
            stdout=subprocess.DEVNULL,
            stderr=open(self.workdir / "gateway.log", "ab"),  # noqa: SIM115
        )

    @property
    def pid(self) -> int:
        """The gateway's process id (taskset execs it)."""
        assert self._proc is not None, "not started"
        return self._proc.pid

    def cpus_allowed(self) -> str:
        """The CPUs the kernel lets the gateway run on (``Cpus_allowed_list``)."""
        with open(f"/proc/{self.pid}/status") as f:
            return next(
                ln.split(":", 1)[1].strip() for ln in f if ln.startswith("Cpus_allowed_list")
            )

    def cpu_seconds(self) -> float:
        """CPU time the gateway process has used so far."""
        return server_proc.cpu_seconds(self.pid)

    def health(self) -> dict[str, Any] | None:
        """The health report, or None while the process does not answer yet."""
        return read_health(self.health_port)

    async def wait_for(
        self, condition: Callable[[dict[str, Any]], bool], within_s: float, what: str
    ) -> dict[str, Any]:
        """Poll the health (10 times a second) until ``condition`` holds; return that report."""
        deadline = time.monotonic() + within_s
        while True:
            report = await asyncio.to_thread(self.health)
            if report is not None and condition(report):
                return report
            if self._proc is not None and self._proc.poll() is not None:
                raise RuntimeError(f"the gateway exited: {self.log()[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"not within {within_s:g} s: {what} (health: {report})")
            await asyncio.sleep(0.1)

    def stop(self) -> None:
        """SIGTERM, then wait (bounded) for the gateway to finish."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(10)

    def log(self) -> str:
        """What the gateway logged so far (JSON lines)."""
        path = self.workdir / "gateway.log"
        return path.read_text(errors="replace") if path.exists() else ""


def delivered(report: dict[str, Any]) -> int:
    """Messages ingest acknowledged, from a health report."""
    return int((report.get("spool") or {}).get("counters", {}).get("delivered", 0))


def spooled(report: dict[str, Any], connector: str) -> int:
    """Values the connector spooled, from a health report."""
    return int(report["connectors"][connector]["values_total"])


def lost(report: dict[str, Any]) -> dict[str, int]:
    """Messages the spool did not deliver for good (dropped, expired, refused, rejected)."""
    counters = (report.get("spool") or {}).get("counters", {})
    names = ("dropped_oldest", "expired", "refused", "rejected")
    return {n: int(counters[n]) for n in names if counters.get(n)}
