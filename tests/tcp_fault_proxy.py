"""A TCP proxy owned by the tests, between clients and the broker, that can fail on cue.

``cut()`` closes every connection and refuses new ones; ``stall()`` keeps connections
open but stops forwarding bytes (a black hole); ``heal()`` goes back to forwarding. It
listens on 127.0.0.1 only and runs its own event loop in a daemon thread, so sync and
async tests can drive it alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading


class FaultProxy:
    """Forward ``127.0.0.1:<port>`` to ``127.0.0.1:<target_port>``, with faults on cue."""

    def __init__(self, port: int, target_port: int) -> None:
        self.port = port
        self.target_port = target_port
        self._mode = "forward"
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.base_events.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._flowing = asyncio.Event()  # cleared while stalled
        self._flowing.set()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def start(self) -> FaultProxy:
        """Listen and forward."""
        self._thread.start()
        self._call(self._listen())
        return self

    def stop(self) -> None:
        """Close everything and stop the loop."""
        self._call(self._close_all(stop_listening=True))
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def cut(self) -> None:
        """Drop every connection and refuse new ones (the broker is gone)."""
        self._mode = "cut"
        self._call(self._close_all(stop_listening=True))

    def stall(self) -> None:
        """Keep connections open but forward nothing (packets vanish)."""
        self._mode = "stall"
        self._loop.call_soon_threadsafe(self._flowing.clear)

    def heal(self) -> None:
        """Forward again; accept new connections."""
        self._mode = "forward"
        self._loop.call_soon_threadsafe(self._flowing.set)
        self._call(self._listen())

    def _call(self, coro: object) -> None:
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)  # type: ignore[arg-type]

    async def _listen(self) -> None:
        if self._server is None:
            self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)

    async def _close_all(self, stop_listening: bool) -> None:
        if stop_listening and self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for writer in list(self._writers):
            writer.close()
        self._writers.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._mode == "cut":
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        self._writers |= {writer, up_writer}
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                await self._flowing.wait()
                if self._mode == "cut":
                    break
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            self._writers.discard(writer)
            with contextlib.suppress(Exception):
                writer.close()
