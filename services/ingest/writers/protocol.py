"""What the service asks of a Kafka writer: ``RecordWriter``, its ``Headers`` and ``Delivered``.

The write path and the commands depend on this alone, and it names no Kafka client, so a
writer can change (or a new client be added, ``HEADWATER_INGEST_PRODUCER``) without
touching them, and the default writer never imports another client.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import NamedTuple, Protocol

#: A record's headers as (key, value) pairs, in order.
Headers = Sequence[tuple[str, bytes]]


class Delivered(NamedTuple):
    """Where the broker stored an acknowledged record."""

    topic: str
    partition: int
    offset: int


class RecordWriter(Protocol):
    """Writes records to Kafka and reports each broker acknowledgement."""

    @property
    def connected(self) -> bool:
        """True once the writer has reached the cluster."""
        ...

    async def start(self) -> None:
        """Connect; raise if the cluster cannot be reached."""

    async def send(
        self, topic: str, key: bytes, value: bytes, headers: Headers
    ) -> asyncio.Future[Delivered]:
        """Queue one record; the returned future resolves on the broker's ack."""
        ...

    def send_now(
        self, topic: str, key: bytes, value: bytes, headers: Headers
    ) -> asyncio.Future[Delivered] | None:
        """Queue one record if that needs no wait, as :meth:`send`; None: only send can.

        The single-message path issues its record without an await (issue 40); None
        (a full queue, or a client whose send always waits) sends it through
        :meth:`send` instead.
        """
        ...

    async def stop(self, timeout_s: float) -> None:
        """Flush what is queued (for at most ``timeout_s``) and disconnect."""
