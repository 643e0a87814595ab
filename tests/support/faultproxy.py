"""A TCP proxy owned by the tests that puts faults between clients and a server on cue.

``FaultProxy`` listens on ``127.0.0.1:<port>`` and forwards every connection to
``127.0.0.1:<target_port>``:

- ``cut()``   the server is gone: every open connection is reset and new ones are refused
              (the listening socket is closed, so connects fail at once);
- ``stall()`` packets vanish: connections stay open (new ones are even accepted) but not
              one byte is forwarded in either direction; reading stops, so the senders'
              socket buffers fill up as they would in front of a black hole;
- ``heal()``  forward again; bytes held back by a stall are delivered in order (TCP would
              have retransmitted them), and new connections are accepted.

The proxy runs its own event loop in a daemon thread, so it keeps forwarding while a test
blocks its own loop (a synchronous Kafka consumer, a subprocess wait), and sync and async
tests drive it alike. Every method returns only once the fault is in place: a call made
after ``cut()`` returns can never reach the server. Loopback only, by construction.

Usage::

    with FaultProxy(target_port=broker_port) as proxy:   # proxy.port is bound already
        ...
        proxy.cut(); ...; proxy.heal()
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import Literal

Mode = Literal["forward", "cut", "stall"]
_LOOPBACK = ("127.0.0.1", "::1", "localhost")
#: Pause reading from one side while the other side has this much unsent.
_HIGH_WATER = 256 * 1024
_CALL_TIMEOUT_S = 10.0


class _Side(asyncio.Protocol):
    """One socket of a proxied connection; what it reads goes to the other socket."""

    def __init__(self, link: _Link, name: str) -> None:
        self.link = link
        self.name = name
        self.transport: asyncio.Transport | None = None
        #: Why reading is paused: "stall", "backpressure", "connecting".
        self.paused_for: set[str] = set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.set_write_buffer_limits(high=_HIGH_WATER)
        if self.link.proxy.mode == "stall":
            self.paused_for.add("stall")
        if self is self.link.client:
            self.paused_for.add("connecting")  # until the upstream socket is there
        if self.paused_for:
            transport.pause_reading()
        if self is self.link.client:
            self.link.proxy._accepted(self.link)

    def data_received(self, data: bytes) -> None:
        self.link.forward(self, data)

    def eof_received(self) -> bool:
        self.link.close()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.link.close()

    # The other side's write buffer is full: stop reading here until it drains.
    def pause_writing(self) -> None:
        self.link.other(self).pause("backpressure")

    def resume_writing(self) -> None:
        self.link.other(self).resume("backpressure")

    def pause(self, reason: str) -> None:
        if not self.paused_for and self.transport is not None and not self.transport.is_closing():
            self.transport.pause_reading()
        self.paused_for.add(reason)

    def resume(self, reason: str) -> None:
        if reason not in self.paused_for:
            return
        self.paused_for.discard(reason)
        if not self.paused_for and self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()


class _Link:
    """One proxied connection: the accepted client socket and its upstream socket."""

    def __init__(self, proxy: FaultProxy) -> None:
        self.proxy = proxy
        self.client = _Side(self, "client")
        self.upstream = _Side(self, "upstream")
        self.closed = False
        self.connector: asyncio.Task[None] | None = None

    def other(self, side: _Side) -> _Side:
        return self.upstream if side is self.client else self.client

    def forward(self, source: _Side, data: bytes) -> None:
        target = self.other(source).transport
        if self.closed or target is None or target.is_closing():
            return
        target.write(data)
        self.proxy._count_bytes(source.name, len(data))

    async def connect(self, host: str, port: int) -> None:
        loop = asyncio.get_running_loop()
        try:
            await loop.create_connection(lambda: self.upstream, host, port)
        except OSError:
            self.close()  # the server is not there: the client sees its connection end
            return
        if self.closed:  # cut while connecting
            self.abort()
            return
        self.client.resume("connecting")

    def close(self) -> None:
        """Close both sockets gracefully (one side ended)."""
        if self.closed:
            return
        self.closed = True
        for side in (self.client, self.upstream):
            if side.transport is not None:
                side.transport.close()
        self.proxy._forget(self)

    def abort(self) -> None:
        """Reset both sockets at once, dropping anything unsent (the server is gone)."""
        self.closed = True
        if self.connector is not None:
            self.connector.cancel()
        for side in (self.client, self.upstream):
            if side.transport is not None:
                side.transport.abort()
        self.proxy._forget(self)


class FaultProxy:
    """Forward ``127.0.0.1:<port>`` to ``<target_host>:<target_port>``, with faults on cue.

    ``port=0`` binds a free port at :meth:`start`; read it from :attr:`port` afterwards
    (for example to tell a broker to advertise the proxy instead of itself).
    """

    def __init__(self, target_port: int, port: int = 0, target_host: str = "127.0.0.1") -> None:
        if target_host not in _LOOPBACK:
            raise ValueError(f"FaultProxy only talks to loopback, not {target_host!r}")
        self.target_host = target_host
        self.target_port = target_port
        self.port = port
        self.mode: Mode = "forward"
        #: Connections accepted, all time (those accepted while cut are reset at once).
        self.accepted = 0
        self.bytes_up = 0  # client -> server
        self.bytes_down = 0  # server -> client
        self._links: set[_Link] = set()
        self._server: asyncio.Server | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="fault-proxy", daemon=True
        )
        self._changed = threading.Condition()

    # --- control (any thread but the proxy's own) --------------------------------------

    def start(self) -> FaultProxy:
        """Bind the listening port and start forwarding."""
        if not self._thread.is_alive():
            self._thread.start()
        self._run(self._listen)
        return self

    def stop(self) -> None:
        """Reset every connection, stop listening and stop the proxy's loop (idempotent)."""
        if not self._thread.is_alive():
            return
        self._run(self._shutdown)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(_CALL_TIMEOUT_S)
        self._loop.close()

    def cut(self) -> None:
        """Reset every open connection and refuse new ones until :meth:`heal`."""
        self._run(self._cut)

    def stall(self) -> None:
        """Keep connections open (and accept new ones) but forward nothing until heal."""
        self._run(self._stall)

    def heal(self) -> None:
        """Forward again: deliver what a stall held back, accept new connections."""
        self._run(self._heal)

    @property
    def open_connections(self) -> int:
        """Connections currently open through the proxy."""
        return len(self._links)

    def wait_until(self, condition: Callable[[FaultProxy], bool], within_s: float) -> None:
        """Block until ``condition(proxy)`` holds (checked on every change); raise on timeout."""
        with self._changed:
            if not self._changed.wait_for(lambda: condition(self), within_s):
                raise TimeoutError(f"fault proxy: condition not met within {within_s}s")

    async def until(self, condition: Callable[[FaultProxy], bool], within_s: float) -> None:
        """:meth:`wait_until` for async tests (does not block the caller's loop)."""
        await asyncio.to_thread(self.wait_until, condition, within_s)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- on the proxy's loop -----------------------------------------------------------

    def _run(self, fn: Callable[[], object]) -> None:
        if threading.current_thread() is self._thread:
            raise RuntimeError("FaultProxy control methods must not run on the proxy's loop")

        async def call() -> None:
            result = fn()
            if asyncio.iscoroutine(result):
                await result

        asyncio.run_coroutine_threadsafe(call(), self._loop).result(_CALL_TIMEOUT_S)

    async def _listen(self) -> None:
        if self._server is not None:
            return
        self._server = await self._loop.create_server(
            self._accept, "127.0.0.1", self.port, reuse_address=True
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def _stop_listening(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
            await server.wait_closed()

    def _accept(self) -> _Side:
        self.accepted += 1
        return _Link(self).client

    def _accepted(self, link: _Link) -> None:
        if self.mode == "cut":  # accepted just before the listener closed
            link.abort()
            return
        self._links.add(link)
        link.connector = self._loop.create_task(link.connect(self.target_host, self.target_port))
        self._notify()

    async def _cut(self) -> None:
        self.mode = "cut"
        await self._stop_listening()
        for link in list(self._links):
            link.abort()
        self._notify()

    def _stall(self) -> None:
        self.mode = "stall"
        for link in self._links:
            link.client.pause("stall")
            link.upstream.pause("stall")
        self._notify()

    async def _heal(self) -> None:
        self.mode = "forward"
        for link in list(self._links):
            link.client.resume("stall")
            link.upstream.resume("stall")
        await self._listen()
        self._notify()

    async def _shutdown(self) -> None:
        await self._cut()
        pending = [t for t in asyncio.all_tasks(self._loop) if t is not asyncio.current_task()]
        for task in pending:
            task.cancel()
        for task in pending:
            with contextlib.suppress(BaseException):
                await task

    def _count_bytes(self, source: str, n: int) -> None:
        if source == "client":
            self.bytes_up += n
        else:
            self.bytes_down += n

    def _forget(self, link: _Link) -> None:
        self._links.discard(link)
        self._notify()

    def _notify(self) -> None:
        with self._changed:
            self._changed.notify_all()
