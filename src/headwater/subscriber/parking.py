"""Park records on the subscriber's own dead-letter topic.

A parked record keeps its original key, value and headers, so it can be read back and
handled again by the same code; these headers say why it was parked.
"""

from __future__ import annotations

import asyncio
import logging
import time

from aiokafka import AIOKafkaProducer
from aiokafka.structs import ConsumerRecord

from headwater.kafka.settings import KafkaSettings
from headwater.subscriber.errors import DeadLetterTopicError

log = logging.getLogger(__name__)

#: The exception class of the last failure (``DecodeError`` for undecodable bytes).
ERROR_CLASS = "subscriber-error-class"
#: Its message, at most 1,000 characters.
ERROR_MESSAGE = "subscriber-error-message"
#: Handler calls made, as ASCII digits (0: it could not be decoded, the handler never ran).
ATTEMPTS = "subscriber-attempts"
#: Where it was read: ``topic/partition@offset``.
SOURCE = "subscriber-source"
#: The consumer group that parked it.
GROUP = "subscriber-group"
#: Milliseconds since the epoch when it was parked, as ASCII digits.
PARKED_AT_MS = "subscriber-parked-at-ms"
#: Every header the parker adds (a record parked twice keeps the first set too).
ADDED_HEADERS = (ERROR_CLASS, ERROR_MESSAGE, ATTEMPTS, SOURCE, GROUP, PARKED_AT_MS)


class Parker:
    """One producer for the dead-letter topic; ``start`` checks the topic can be written."""

    def __init__(self, kafka: KafkaSettings, topic: str, group_id: str) -> None:
        self.topic = topic
        self._kafka = kafka
        self._group = group_id
        self._producer: AIOKafkaProducer | None = None

    async def start(self, within_s: float = 30.0) -> None:
        """Connect and make sure the topic exists; raise DeadLetterTopicError otherwise."""
        if self._producer is not None:
            return
        producer = AIOKafkaProducer(
            acks="all",
            enable_idempotence=True,
            request_timeout_ms=int(within_s * 1000),
            # aiokafka's default partitioner is murmur2 already: the shared PARTITIONER's hash.
            **self._kafka.aiokafka_config(f"headwater-subscriber-{self._group}"),
        )
        await producer.start()
        try:
            # Now, not when the first poison record arrives: a missing topic is found at
            # deploy time instead of in the middle of an incident.
            await asyncio.wait_for(producer.partitions_for(self.topic), within_s + 5)
        except Exception as exc:
            await producer.stop()
            raise DeadLetterTopicError(self.topic, f"no metadata ({exc!r})") from exc
        self._producer = producer

    async def stop(self) -> None:
        """Flush and close (idempotent)."""
        producer, self._producer = self._producer, None
        if producer is not None:
            await producer.stop()

    async def park(
        self, record: ConsumerRecord[bytes, bytes], exc: Exception, attempts: int
    ) -> None:
        """Write ``record`` with why it failed and wait for the broker's ack."""
        if self._producer is None:
            raise RuntimeError("Parker.start() was not awaited")
        source = f"{record.topic}/{record.partition}@{record.offset}"
        headers = [
            *(record.headers or ()),
            (ERROR_CLASS, type(exc).__name__.encode()),
            (ERROR_MESSAGE, str(exc)[:1000].encode()),
            (ATTEMPTS, str(attempts).encode()),
            (SOURCE, source.encode()),
            (GROUP, self._group.encode()),
            (PARKED_AT_MS, str(int(time.time() * 1000)).encode()),
        ]
        # The ack comes before the commit that moves past the record: nothing parked is lost.
        await self._producer.send_and_wait(
            self.topic, record.value, key=record.key, headers=headers
        )
        log.error(
            "record parked on the dead-letter topic",
            extra={
                "topic": self.topic,
                "source": source,
                "error_class": type(exc).__name__,
                "error": str(exc)[:200],
                "attempts": attempts,
            },
        )
