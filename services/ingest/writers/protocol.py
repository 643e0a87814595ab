"""What the service asks of a Kafka writer: the ``RecordWriter`` protocol and its ``Headers``.

The write path and the command relay depend on this alone, so a writer can change (or a
new client be added, ``HEADWATER_INGEST_PRODUCER``) without touching them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Protocol

from aiokafka.structs import RecordMetadata

#: A record's headers as (key, value) pairs, in order.
Headers = Sequence[tuple[str, bytes]]


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
    ) -> asyncio.Future[RecordMetadata]:
        """Queue one record; the returned future resolves on the broker's ack."""
        ...

    async def stop(self, timeout_s: float) -> None:
        """Flush what is queued (for at most ``timeout_s``) and disconnect."""
