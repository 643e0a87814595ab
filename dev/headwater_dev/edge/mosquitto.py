"""A real Mosquitto (Debian's package) as the edge MQTT broker, on a loopback port.

Each broker has its own config file and persistence folder, so a restart (``stop`` then
``start`` on the same port) keeps the sessions and their queued messages, as a broker
on a gateway host does. ``.ci/run`` installs the package when it is missing.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

MISSING = "mosquitto is not installed: apt-get install -y mosquitto (.ci/run does)"


def installed() -> str | None:
    """Return the path of the mosquitto binary, or None when it is not installed."""
    binary = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
    return binary if Path(binary).exists() else None


class Mosquitto:
    """One broker process on ``127.0.0.1:port``; ``start``/``stop`` may be called again (a restart).

    ``max_queued`` bounds the messages the broker queues per session (0: no bound);
    ``max_inflight`` the QoS 1 messages each client may have unacknowledged.
    """

    def __init__(
        self, workdir: Path, port: int, max_queued: int = 100_000, max_inflight: int = 100
    ) -> None:
        binary = installed()
        if binary is None:
            raise RuntimeError(MISSING)
        self.binary = binary
        self.port = port
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.config = workdir / "mosquitto.conf"
        self.config.write_text(
            f"listener {self.port} 127.0.0.1\n"
            "allow_anonymous true\n"
            "persistence true\n"
            f"persistence_location {workdir}/\n"
            f"max_queued_messages {max_queued}\n"
            f"max_inflight_messages {max_inflight}\n"
            "log_dest stderr\n" + ("user root\n" if os.geteuid() == 0 else "")
            # Run as root (CI's containers), it would switch to the user mosquitto, who
            # cannot write its persistence file into the test's folder.
        )
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start the broker and wait until it listens (at most 15 s)."""
        self._proc = subprocess.Popen(
            [self.binary, "-c", str(self.config)],
            stdout=subprocess.DEVNULL,
            stderr=open(self.workdir / "mosquitto.log", "ab"),  # noqa: SIM115
        )
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), 0.2):
                    return
            except OSError:
                if self._proc.poll() is not None:
                    raise RuntimeError(f"mosquitto exited: {self.log()[-2000:]}") from None
                time.sleep(0.05)
        raise RuntimeError("mosquitto did not listen within 15 s")

    def stop(self) -> None:
        """Stop the broker (it saves its sessions first)."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()  # mosquitto writes its persistence file on SIGTERM
            self._proc.wait(15)
        self._proc = None

    def log(self) -> str:
        """Return what the broker logged so far."""
        path = self.workdir / "mosquitto.log"
        return path.read_text(errors="replace") if path.exists() else ""
