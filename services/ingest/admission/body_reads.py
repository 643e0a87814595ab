"""Room for request bodies being read: each counts at the largest size it may turn out to have.

While a publish call's body is being read, gRPC's core lets the whole message in (up to
``HEADWATER_INGEST_MAX_REQUEST_BYTES``) before Python sees a byte of it. A size estimate
from earlier requests can be trained by the caller (100 calls of 80 bytes, then 1,024
calls of 4 MiB at once would each count at 80 bytes: ~4 GiB against an 8 MiB bound), so
a read reserves the largest allowed size instead, in a room as large as the process's
in-flight bound (``HEADWATER_INGEST_MAX_INFLIGHT_BYTES``): at most that many bytes of
bodies are read at once, beside at most that many admitted. Once read, a body counts at
its real size against the bound itself (``Admission.admit``).

Two rules keep that from starving callers:

- a read that does not fit waits in line (first come, first served, skipping waiters
  that still cannot go), bounded in time; waiting holds the call's slot, not a body;
- each gateway reads one body at a time, so a gateway whose bodies are slow (or never
  come) holds at most one reservation and the others keep reading. The anonymous
  identity is every caller at once and gets no such rule.

Stream frames are not reserved here: a stream keeps a read pending whenever its window has
room (that is how an idle stream's next frame is noticed), so a reservation would hold the
largest size for every idle stream and block its gateway's one read. A frame counts once
read (``Admission.admit``); what gRPC's core holds before that is bounded per stream by
HTTP/2 flow control (docs/operations.md, "Stream frames and memory").
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import TracebackType

from headwater.ingest.admission.auth import ANONYMOUS, Gateway
from headwater.ingest.errors import OverloadedError


class BodyReads:
    """The reservations of bodies being read, and the line of reads waiting for room.

    Args:
        reserve_bytes: what one read reserves (the largest request gRPC accepts).
        free_bytes: the room for reservations (the in-flight bound).
        full: the refusal to raise when no room came in time.
    """

    def __init__(
        self,
        reserve_bytes: int,
        free_bytes: Callable[[], int],
        full: Callable[[], OverloadedError],
    ) -> None:
        self.reserve_bytes = reserve_bytes
        self._free_bytes = free_bytes
        self._full = full
        #: Bytes reserved by reads in progress.
        self.reserved = 0
        #: Reads in progress per gateway id (entries leave at zero).
        self.by_gateway: dict[str, int] = {}
        self._line: list[tuple[str | None, asyncio.Future[None]]] = []

    def reading(self, gateway: Gateway, wait_s: float) -> Reading:
        """Hold a read reservation for an ``async with`` block; wait up to ``wait_s`` for one.

        Raises:
            OverloadedError: on entering, no room came within ``wait_s``.
        """
        return Reading(self, None if gateway is ANONYMOUS else gateway.gateway_id, wait_s)

    async def take(self, key: str | None, wait_s: float) -> None:
        """Book a read of gateway ``key`` (None: anonymous), waiting up to ``wait_s``.

        Raises:
            OverloadedError: no room came within ``wait_s``.
        """
        if not self.take_now(key):
            await self._wait(key, wait_s)

    def take_now(self, key: str | None) -> bool:
        """Book a read of gateway ``key`` if it may go at once (no wait); True if booked."""
        # Waiters that cannot go (their gateway is reading) do not hold this one back.
        if self._fits(key) and not any(self._fits(k) for k, _ in self._line):
            self._book(key)
            return True
        return False

    def give(self, key: str | None) -> None:
        """Give back a read booked by :meth:`take`, and let waiting reads in."""
        self._unbook(key)
        self.wake()

    @property
    def count(self) -> int:
        """Reads in progress."""
        return self.reserved // self.reserve_bytes if self.reserve_bytes else 0

    def wake(self) -> None:
        """Let waiting reads in, in arrival order, while their reservations fit."""
        for entry in list(self._line):
            key, waiter = entry
            if waiter.done():
                self._line.remove(entry)
                continue
            if self.reserved + self.reserve_bytes > self._free_bytes():
                return
            if self._fits(key):
                # Booked here, so one release wakes only as many reads as fit.
                self._line.remove(entry)
                self._book(key)
                waiter.set_result(None)

    def _fits(self, key: str | None) -> bool:
        if key is not None and key in self.by_gateway:
            return False
        return self.reserved + self.reserve_bytes <= self._free_bytes()

    def _book(self, key: str | None) -> None:
        self.reserved += self.reserve_bytes
        if key is not None:
            self.by_gateway[key] = self.by_gateway.get(key, 0) + 1

    def _unbook(self, key: str | None) -> None:
        self.reserved -= self.reserve_bytes
        if key is not None:
            left = self.by_gateway[key] - 1
            if left:
                self.by_gateway[key] = left
            else:
                del self.by_gateway[key]

    async def _wait(self, key: str | None, wait_s: float) -> None:
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (key, waiter)
        self._line.append(entry)
        try:
            await asyncio.wait_for(asyncio.shield(waiter), wait_s)
        except BaseException as exc:
            if waiter.done():  # booked just as the wait ended: keep it, or give it back
                if isinstance(exc, TimeoutError):
                    return
                self._unbook(key)
                self.wake()
                raise
            waiter.cancel()
            if entry in self._line:
                self._line.remove(entry)
            if isinstance(exc, TimeoutError):
                raise self._full() from None
            raise


class Reading:
    """One body read's reservation: booked on entering the block, given back on leaving it.

    A class, not an ``@asynccontextmanager``: every publish call enters one (issue 23).
    """

    __slots__ = ("_key", "_reads", "_wait_s")

    def __init__(self, reads: BodyReads, key: str | None, wait_s: float) -> None:
        self._reads = reads
        self._key = key
        self._wait_s = wait_s

    def take_now(self) -> bool:
        """Book the reservation if that needs no wait (True); else :meth:`take` must wait.

        With :meth:`give`, the plain form of the ``async with`` block for the publish
        path (issue 40): most reads go at once, without a coroutine.
        """
        return self._reads.take_now(self._key)

    async def take(self) -> None:
        """Book the reservation, waiting for room as long as allowed.

        Raises:
            OverloadedError: no room came in time.
        """
        await self._reads.take(self._key, self._wait_s)

    def give(self) -> None:
        """Give the reservation back (once, after :meth:`take_now` or :meth:`take`)."""
        self._reads.give(self._key)

    async def __aenter__(self) -> None:
        await self.take()

    async def __aexit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _traceback: TracebackType | None,
    ) -> None:
        self.give()
