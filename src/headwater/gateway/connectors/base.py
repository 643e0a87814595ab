"""What every connector shares: its health, the sink it spools into, and its interface.

A connector reads one kind of source (an MQTT broker, an OPC UA server, a Modbus device),
turns what it reads into device messages and hands them to the :class:`Sink`, which
writes them to the gateway's one spool. ``run(stop)`` keeps the connector connected
(reconnecting with backoff) until ``stop`` is set; ``command`` writes a command from the
cloud back to the machine.
"""

from __future__ import annotations

import abc
import asyncio
import logging
import random
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from headwater.gateway.client import GatewayClient
from headwater.gateway.errors import SpoolFullError
from headwater.gateway.records import NewMessage
from headwater.proto.commands.v1.command_pb2 import Command

log = logging.getLogger(__name__)

#: What the gateway does when the spool is full: ``backpressure`` holds data back where
#: the source can wait (MQTT QoS 1 stays unacknowledged) and drops the oldest elsewhere;
#: ``drop_oldest`` drops the oldest for every source.
FullPolicy = Literal["backpressure", "drop_oldest"]
FULL_POLICIES: tuple[str, ...] = ("backpressure", "drop_oldest")


@dataclass
class ConnectorHealth:
    """What an operator asks of a connector: connected? values flowing? errors?"""

    connected: bool = False
    values_total: int = 0
    errors_total: int = 0
    #: Gaps marked in the data (an OPC UA server that lost values across a reconnect).
    gaps_total: int = 0
    last_value_ms: int | None = None
    last_error: str = ""
    _recent: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=64))

    def values(self, n: int) -> None:
        """Count ``n`` values spooled now."""
        self.values_total += n
        self.last_value_ms = int(time.time() * 1000)
        self._recent.append((time.monotonic(), n))

    def error(self, text: str) -> None:
        """Count an error and keep its text for the health report."""
        self.errors_total += 1
        self.last_error = text[:500]

    def values_per_s(self, window_s: float = 10.0) -> float:
        """Return the rate of values over the last ``window_s`` seconds."""
        since = time.monotonic() - window_s
        return sum(n for t, n in self._recent if t >= since) / window_s

    def report(self) -> dict[str, Any]:
        """Return the health as JSON-ready values."""
        return {
            "connected": self.connected,
            "values_total": self.values_total,
            "values_per_s": round(self.values_per_s(), 1),
            "last_value_ms": self.last_value_ms,
            "errors_total": self.errors_total,
            "last_error": self.last_error,
            "gaps_total": self.gaps_total,
        }


class Sink:
    """Where connectors put device messages: the gateway's spool, by the full-spool policy."""

    def __init__(self, client: GatewayClient, policy: FullPolicy, retry_s: float = 0.2) -> None:
        self._client = client
        self._policy = policy
        self._retry_s = retry_s

    async def put(
        self,
        connector: str,
        endpoint: str,
        messages: Sequence[NewMessage],
        can_wait: bool,
        stop: asyncio.Event,
    ) -> int:
        """Spool ``messages`` in order; return how many of them (from the first) are on disk.

        A source that ``can_wait`` (it keeps the data until we acknowledge it) waits for
        room under the ``backpressure`` policy; fewer than all means ``stop`` came first:
        acknowledge only those. Everything else makes room by dropping the oldest
        messages, counted in the spool and logged here. A message bigger than the whole
        spool can never fit: it is logged, counted as refused, and counted here as done
        so the source does not offer it forever.
        """
        waiting = self._policy == "backpressure" and can_wait
        logged = False
        while True:
            try:
                enqueued = await self._client.enqueue_many(
                    endpoint, messages, "refuse" if waiting else "drop_oldest"
                )
            except SpoolFullError as exc:
                if exc.message_bytes > exc.max_bytes and len(messages) > 1:
                    # The batch alone outsizes the spool: in halves, in order.
                    half = len(messages) // 2
                    done = await self.put(connector, endpoint, messages[:half], can_wait, stop)
                    if done < half:
                        return done
                    return half + await self.put(
                        connector, endpoint, messages[half:], can_wait, stop
                    )
                if exc.message_bytes > exc.max_bytes or not waiting:
                    log.error(
                        "message larger than the spool: not spooled",
                        extra={"connector": connector, "message_bytes": exc.message_bytes},
                    )
                    return len(messages)
                if not logged:
                    log.warning(
                        "spool full: holding data unacknowledged at the source until there is room",
                        extra={
                            "connector": connector,
                            "used_bytes": exc.used_bytes,
                            "max_bytes": exc.max_bytes,
                            "messages": len(messages),
                        },
                    )
                    logged = True
                if await wait_for(stop, self._retry_s * (0.5 + random.random())):
                    return 0
                continue
            if enqueued.dropped or enqueued.expired:
                log.warning(
                    "spool full: dropped the oldest messages to make room",
                    extra={
                        "connector": connector,
                        "dropped": len(enqueued.dropped),
                        "expired": enqueued.expired,
                    },
                )
            if logged:
                log.info("spool has room again", extra={"connector": connector})
            return len(messages)


async def wait_for(event: asyncio.Event, seconds: float) -> bool:
    """Wait up to ``seconds`` for ``event``; True when it is set."""
    try:
        await asyncio.wait_for(event.wait(), seconds)
    except TimeoutError:
        return False
    return True


class Connector(abc.ABC):
    """One source of device data (see the module docstring)."""

    def __init__(self, name: str, sink: Sink) -> None:
        self.name = name
        self.sink = sink
        self.health = ConnectorHealth()

    @abc.abstractmethod
    async def run(self, stop: asyncio.Event) -> None:
        """Read the source until ``stop`` is set, reconnecting as needed."""

    @abc.abstractmethod
    def owns(self, device_id: str) -> bool:
        """Return True when commands for ``device_id`` go through this connector."""

    @abc.abstractmethod
    async def command(self, command: Command) -> bytes | None:
        """Write ``command`` to the machine; the result bytes, or raise RejectCommand."""


class Backoff:
    """Exponential backoff with full jitter between reconnects; reset after a success."""

    def __init__(self, initial_s: float = 0.5, max_s: float = 30.0) -> None:
        self.initial_s, self.max_s = initial_s, max_s
        self._attempt = 0

    def reset(self) -> None:
        """Start again from the initial delay (after a good connection)."""
        self._attempt = 0

    async def sleep(self, stop: asyncio.Event) -> bool:
        """Sleep the next delay; True when ``stop`` was set meanwhile."""
        ceiling = min(self.max_s, self.initial_s * 2**self._attempt)
        self._attempt = min(self._attempt + 1, 16)
        return await wait_for(stop, random.uniform(ceiling / 2, ceiling))
