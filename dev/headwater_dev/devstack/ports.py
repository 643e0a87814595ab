"""Free TCP ports on loopback that nothing else will take before their server binds them.

A port from ``bind(port=0)`` comes from the kernel's ephemeral range, the same range every
outgoing connection's local port comes from. Between the moment a port is picked and the
moment the server that was handed it binds (seconds, when that server is a JVM or a Spark
driver), a Kafka client or Spark connecting anywhere can take it as its local port, and the
server fails with "Address already in use". The suite saw exactly that on a CI machine.

So ports are picked below the ephemeral range, where the kernel never hands out ports on
its own, at random, checked free by binding, and never handed out twice by one process.
"""

from __future__ import annotations

import functools
import random
import socket
from pathlib import Path

#: Below Kubernetes' node ports (30000-32767) and above well-known services.
_LOWEST = 20000
_HIGHEST = 29999
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_handed_out: set[int] = set()


@functools.cache
def _first_ephemeral() -> int:
    try:
        return int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _is_free(host: str, port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port on ``host`` that is free now and outside the ephemeral range."""
    highest = min(_HIGHEST, _first_ephemeral() - 1)
    for _ in range(200):
        if highest <= _LOWEST:
            break
        port = random.randint(_LOWEST, highest)
        if port not in _handed_out and _is_free(host, port):
            _handed_out.add(port)
            return port
    # An unusual ephemeral range (or a crowded one): the kernel's choice, race and all.
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
