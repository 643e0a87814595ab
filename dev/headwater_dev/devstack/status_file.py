"""The state file of a background dev stack: who runs, on which ports, how far it got.

The supervisor writes ``<workdir>/state.json``; ``up``, ``status`` and ``down`` read it.
Writes are atomic (write, then rename), so a reader never sees half a file. The file holds
the dev gateway's bearer token, so only its owner may read it.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from headwater.errors import HeadwaterError

STATE_FILE = "state.json"


class StackRunningError(HeadwaterError, RuntimeError):
    """A background dev stack runs in the folder another run wants to use."""


@dataclass
class StackState:
    """What a background dev stack is and how far it got."""

    supervisor_pid: int
    workdir: str
    ports: dict[str, int]
    with_enricher: bool
    token: str
    gateway_id: str
    device_id: str
    #: starting, up, degraded (a piece exited), stopping, failed.
    status: str = "starting"
    step: str = ""
    pids: dict[str, int] = field(default_factory=dict)
    exited: dict[str, int] = field(default_factory=dict)
    #: The last lines of an exited piece's log, by piece: why it exited.
    exit_logs: dict[str, list[str]] = field(default_factory=dict)
    error: str | None = None
    #: The piece whose failure stopped the start (its log's tail is what ``up`` shows).
    failed_part: str | None = None
    #: Kafka nodes, on ports["kafka"] and the next ones.
    brokers: int = 1

    @property
    def grpc_target(self) -> str:
        """``host:port`` of the ingest service."""
        return f"127.0.0.1:{self.ports['grpc']}"

    @property
    def bootstrap_servers(self) -> str:
        """The Kafka bootstrap address: every node's."""
        first = self.ports["kafka"]
        return ",".join(f"127.0.0.1:{first + i}" for i in range(self.brokers))

    def metrics_url(self, service: str) -> str:
        """The Prometheus scrape URL of ``ingest`` or ``enricher``."""
        return f"http://127.0.0.1:{self.ports[f'{service}_metrics']}/metrics"


def read(workdir: Path) -> StackState | None:
    """Return the state in ``workdir``, or None when there is none (or it is unreadable)."""
    try:
        data: dict[str, Any] = json.loads((workdir / STATE_FILE).read_text())
        return StackState(**data)
    except (OSError, ValueError, TypeError):
        return None


def write(workdir: Path, state: StackState) -> None:
    """Replace the state in ``workdir`` atomically, readable by its owner only."""
    tmp = workdir / f".{STATE_FILE}.{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(asdict(state), out, indent=2)
    os.replace(tmp, workdir / STATE_FILE)


def remove(workdir: Path) -> None:
    """Remove the state file (the stack stopped)."""
    (workdir / STATE_FILE).unlink(missing_ok=True)


def alive(pid: int | None) -> bool:
    """True when process ``pid`` runs (a zombie, dead but not yet reaped, does not count)."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive, and certainly not ours to signal
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc (macOS): kill(0) is all we know
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def runs(pid: int | None, marker: str) -> bool:
    """True when ``pid`` is alive and its command line contains ``marker``.

    Pids are reused: a state file left behind by a crash may name a pid that now belongs
    to an unrelated process, which must never be signalled.
    """
    if not alive(pid):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True  # no /proc: trust the state file
    return marker.encode() in cmdline
