"""Per-gateway issue order: produce calls leave in the order the requests arrived.

Kafka keeps a device's order only if the records reach the producer in that order (the
idempotent producer and one partition per device keep it from there, acks may overlap).
The event loop works on several requests at once (stream frames in a window, concurrent
publish calls of one gateway), and each gives the loop back between messages, so without
a turn their produce calls would interleave: the issue-23 review saw 13 inversions in
800 messages of one device.

A request takes a place in its gateway's line when it arrives (synchronously, so the
place is the arrival order), waits for the requests ahead of it to finish *issuing* its
records, issues its own, then hands the turn on. Waiting for acks happens after the turn,
so a gateway's requests still overlap at the broker. The line is per gateway, not per
process: other gateways never wait for this one.

Within one stream, :class:`RefusalHold` keeps frames sent behind a frame refused for
overload from being written before it is sent again.
"""

from __future__ import annotations

import asyncio
from collections import deque
from types import TracebackType

from headwater.ingest.errors import OverloadedError


class Place:
    """One request's place in its gateway's line; :meth:`turn` waits for it, then holds it.

    Plain bookkeeping (issue 40): a place is an entry in its line, and a future is made
    only for a request that must wait; one whose turn has come when it gets there (most
    of them) costs no future, callback or await.
    """

    __slots__ = ("_left", "_line", "_waiter")

    def __init__(self, line: IssueLine) -> None:
        self._line = line
        self._left = False
        self._waiter: asyncio.Future[None] | None = None

    @property
    def first(self) -> bool:
        """True once every earlier request of the gateway has issued its records (or left)."""
        return self._line.head is self

    def turn(self) -> Place:
        """Wait (``async with``) until every earlier request of the gateway has issued its records.

        Leaving the block (normally, by a timeout or a cancellation, even while still
        waiting) hands the turn on, but never before the requests ahead have issued
        theirs: a request that gave up must not let a later one overtake an earlier one.
        """
        return self

    async def __aenter__(self) -> None:
        # A class, not an @asynccontextmanager: entered by every request (issue 23).
        if not self.first:
            await self.wait()

    async def wait(self) -> None:
        """Wait until :attr:`first`; leave the line if the wait ends otherwise."""
        waiter = self._waiter = asyncio.get_running_loop().create_future()
        try:
            await waiter
        except BaseException:
            self.leave()
            raise

    async def __aexit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _traceback: TracebackType | None,
    ) -> None:
        self.leave()

    def leave(self) -> None:
        """Hand the turn on (idempotent); used directly by a request refused before its turn."""
        if not self._left:
            self._left = True
            self._line.left(self)

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class IssueLine:
    """The line of one gateway: the places not yet left, in arrival order."""

    def __init__(self, lines: IssueOrder, key: str) -> None:
        self._lines = lines
        self._key = key
        self._places: deque[Place] = deque()

    @property
    def head(self) -> Place | None:
        """The place whose turn it is."""
        return self._places[0] if self._places else None

    def join(self) -> Place:
        """Take the place after the last one taken."""
        place = Place(self)
        self._places.append(place)
        return place

    def left(self, place: Place) -> None:
        """Note that ``place`` left; once the head has, the turn goes to the next not left.

        A place that leaves out of turn (it gave up waiting) stays in the line until the
        ones ahead have left, so nothing behind it overtakes them. The line is dropped
        once empty: the table holds only gateways with requests in progress.
        """
        places = self._places
        if places[0] is not place:
            return
        while places and places[0]._left:
            places.popleft()
        if places:
            places[0]._wake()
        else:
            self._lines.drop(self._key)


class IssueOrder:
    """The lines of every gateway with a request in progress."""

    def __init__(self) -> None:
        self._lines: dict[str, IssueLine] = {}

    def join(self, gateway_id: str) -> Place:
        """Take the next place in ``gateway_id``'s line (call when the request arrives)."""
        line = self._lines.get(gateway_id)
        if line is None:
            line = self._lines[gateway_id] = IssueLine(self, gateway_id)
        return line.join()

    def drop(self, gateway_id: str) -> None:
        """Forget ``gateway_id``'s line."""
        self._lines.pop(gateway_id, None)

    def __len__(self) -> int:
        return len(self._lines)


class RefusalHold:
    """Keeps a stream's later frames from overtaking a frame refused for overload.

    A frame refused whole (RESOURCE_EXHAUSTED, nothing written) is sent again by the
    gateway after the RetryInfo delay. Frames it sent behind it meanwhile would otherwise
    be written first, and a device's readings would be stored out of order. So once a
    frame of the stream is refused, every frame of the stream is refused the same way
    until that delay has passed: the gateway resends them all, oldest first.
    """

    def __init__(self) -> None:
        self._until = 0.0
        self._refusal: OverloadedError | None = None

    def check(self) -> None:
        """Raise OverloadedError while an earlier frame's refusal holds the stream."""
        refusal = self._refusal
        if refusal is None:
            return
        left = self._until - asyncio.get_running_loop().time()
        if left <= 0:
            self._refusal = None
            return
        # A new exception each time: re-raising one object would grow its traceback.
        raise OverloadedError(
            f"an earlier frame of this stream was refused ({refusal.message}); this one is "
            "refused too so that the resent frames keep their order",
            retry_delay_s=left,
            limit=refusal.limit,
            setting=refusal.setting,
            limit_value=refusal.limit_value,
            subject=refusal.subject,
        )

    def refused(self, err: OverloadedError) -> None:
        """Hold the stream for ``err``'s retry delay."""
        until = asyncio.get_running_loop().time() + (err.retry_delay_s or 0.0)
        if until > self._until:
            self._until, self._refusal = until, err
