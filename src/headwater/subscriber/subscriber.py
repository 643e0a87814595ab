"""At-least-once consumption of Headwater's completion events and common-format events.

A ``Subscriber`` hands each record, decoded into the generated class, to an async
handler and commits a partition's offset only past records that are done: handled,
recognised as a duplicate (by a stable id in a dedup store), or parked. A handler that
keeps failing is retried with backoff a bounded number of times, then the record is parked
on the subscriber's own dead-letter topic with the error, and the stream moves on. An
undecodable record is parked at once.

Offsets are never reset implicitly: a group without a committed offset, or whose offset
fell out of the log, stops with :class:`StartPointRequiredError`, which says how to choose
a start point (``headwater offsets reset``). ``start="earliest"|"latest"`` is the explicit
opt-in for a brand-new group.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka import errors as kafka_errors
from google.protobuf.message import Message
from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

from headwater.kafka_settings import KafkaSettings
from headwater.proto.events.v1 import completion_pb2, event_pb2
from headwater.subscriber.dedup import DedupStore, MemoryDedup

log = logging.getLogger(__name__)

#: Headers a parked record carries besides its original ones.
PARKED_ERROR_CLASS = "subscriber-error-class"
PARKED_ERROR_MESSAGE = "subscriber-error-message"
PARKED_ATTEMPTS = "subscriber-attempts"
PARKED_SOURCE = "subscriber-source"  # topic/partition@offset


@dataclass(frozen=True)
class Delivery:
    """One record for the handler: the decoded message and where it came from."""

    message: Message
    #: The stable id it is deduplicated by.
    key: str
    topic: str
    partition: int
    offset: int
    headers: tuple[tuple[str, bytes], ...]


Decoder = Callable[[bytes], tuple[Message, str]]
Handler = Callable[[Delivery], Awaitable[None]]


def decode_completion(value: bytes) -> tuple[Message, str]:
    """Decode a Completion; its id is message id + outcome + attempt (a replay repeats all)."""
    c = completion_pb2.Completion.FromString(value)
    if not c.message_id or not c.outcome:
        raise ValueError("not a Completion: message_id and outcome are required")
    return c, f"{c.message_id}:{completion_pb2.Outcome.Name(c.outcome)}:{c.attempt}"


def decode_event(value: bytes) -> tuple[Message, str]:
    """Decode a common-format Event; its id is ``event_id``."""
    e = event_pb2.Event.FromString(value)
    if not e.event_id:
        raise ValueError("not an Event: event_id is required")
    return e, e.event_id


class StartPointRequiredError(RuntimeError):
    """The group has no usable committed offset; a person must choose where to start."""


class Subscriber:
    """Consume ``topics`` as consumer group ``group_id`` (see the module docstring)."""

    def __init__(
        self,
        kafka: KafkaSettings,
        group_id: str,
        topics: Sequence[str],
        handler: Handler,
        decoder: Decoder = decode_completion,
        dedup: DedupStore | None = None,
        dead_letter_topic: str | None = None,
        max_attempts: int = 5,
        backoff_initial_s: float = 0.2,
        backoff_max_s: float = 10.0,
        start: Literal["earliest", "latest"] | None = None,
    ) -> None:
        self.kafka = kafka
        self.group_id = group_id
        self.topics = list(topics)
        self.dead_letter_topic = dead_letter_topic or f"{group_id}.deadletter.v1"
        self._handler = handler
        self._decoder = decoder
        self._dedup = dedup if dedup is not None else MemoryDedup()
        self._max_attempts = max_attempts
        self._backoff = (backoff_initial_s, backoff_max_s)
        self._start = start
        self._lag: dict[TopicPartition, int] = {}
        meter = metrics.get_meter("headwater.subscriber")
        self._records = meter.create_counter(
            "headwater.subscriber.records", unit="{record}", description="By result"
        )
        meter.create_observable_gauge(
            "headwater.subscriber.lag",
            [self._observe_lag],
            "{record}",
            "Records behind the log end, per partition",
        )
        #: Results so far: handled, duplicate, parked.
        self.counts: dict[str, int] = {"handled": 0, "duplicate": 0, "parked": 0}

    def _observe_lag(self, _options: CallbackOptions) -> list[Observation]:
        return [
            Observation(lag, {"topic": tp.topic, "partition": tp.partition})
            for tp, lag in self._lag.items()
        ]

    async def run(self, stop: asyncio.Event) -> None:
        """Consume until ``stop`` is set: finish the current record, commit, leave the group."""
        security = self.kafka.aiokafka_security()
        consumer = AIOKafkaConsumer(
            *self.topics,
            bootstrap_servers=self.kafka.bootstrap_servers,
            group_id=self.group_id,
            enable_auto_commit=False,
            auto_offset_reset="none",
            **security,
        )
        producer = AIOKafkaProducer(
            bootstrap_servers=self.kafka.bootstrap_servers,
            acks="all",
            enable_idempotence=self.kafka.enable_idempotence,
            **security,
        )
        await producer.start()
        try:
            await consumer.start()
            try:
                await self._consume(consumer, producer, stop)
            finally:
                await consumer.stop()  # leaves the group: a rebalance hands partitions on
        finally:
            await producer.stop()

    async def _consume(
        self, consumer: AIOKafkaConsumer, producer: AIOKafkaProducer, stop: asyncio.Event
    ) -> None:
        while not stop.is_set():
            try:
                batches = await consumer.getmany(timeout_ms=300, max_records=200)
            except kafka_errors.NoOffsetForPartitionError as exc:
                tp = exc.args[0]
                if self._start == "earliest":
                    await consumer.seek_to_beginning(tp)
                    continue
                if self._start == "latest":
                    await consumer.seek_to_end(tp)
                    continue
                raise StartPointRequiredError(
                    _start_point_message(self.group_id, tp, "no committed offset")
                ) from None
            except kafka_errors.OffsetOutOfRangeError as exc:
                raise out_of_range_error(self.group_id, exc) from None
            for tp, records in batches.items():
                done = None
                for record in records:
                    if stop.is_set():
                        break  # what is not done is not committed: delivered again later
                    await self._process(record, producer)
                    done = record.offset + 1
                if done is not None:
                    await consumer.commit({tp: done})
                high = consumer.highwater(tp)
                if high is not None and done is not None:
                    self._lag[tp] = max(0, high - done)

    async def _process(self, record: Any, producer: AIOKafkaProducer) -> None:
        headers = tuple(record.headers or ())
        try:
            message, key = self._decoder(record.value or b"")
        except Exception as exc:  # undecodable: park it, never block the partition
            await self._park(record, producer, exc, 0)
            return
        if self._dedup.seen(key):
            self._count("duplicate")
            return
        delivery = Delivery(message, key, record.topic, record.partition, record.offset, headers)
        for attempt in range(1, self._max_attempts + 1):
            try:
                await self._handler(delivery)
            except Exception as exc:
                if attempt == self._max_attempts:
                    await self._park(record, producer, exc, attempt)
                    return
                delay = random.uniform(
                    0, min(self._backoff[1], self._backoff[0] * 2 ** (attempt - 1))
                )
                log.warning(
                    "handler failed; retrying",
                    extra={
                        "key": key,
                        "attempt": attempt,
                        "error": repr(exc),
                        "retry_in_s": round(delay, 2),
                    },
                )
                await asyncio.sleep(delay)
            else:
                self._dedup.record(key)
                self._count("handled")
                return

    async def _park(
        self, record: Any, producer: AIOKafkaProducer, exc: Exception, attempts: int
    ) -> None:
        headers = [
            *(record.headers or ()),
            (PARKED_ERROR_CLASS, type(exc).__name__.encode()),
            (PARKED_ERROR_MESSAGE, str(exc)[:1000].encode()),
            (PARKED_ATTEMPTS, str(attempts).encode()),
            (PARKED_SOURCE, f"{record.topic}/{record.partition}@{record.offset}".encode()),
        ]
        # Awaiting the ack before the commit: a parked record is never lost.
        await producer.send_and_wait(
            self.dead_letter_topic, record.value, key=record.key, headers=headers
        )
        log.error(
            "record parked on the dead-letter topic",
            extra={
                "topic": self.dead_letter_topic,
                "source": f"{record.topic}/{record.partition}@{record.offset}",
                "error": repr(exc),
                "attempts": attempts,
            },
        )
        self._count("parked")

    def _count(self, result: str) -> None:
        self.counts[result] += 1
        self._records.add(1, {"group": self.group_id, "result": result})


def out_of_range_error(
    group: str, exc: kafka_errors.OffsetOutOfRangeError
) -> StartPointRequiredError:
    """Translate aiokafka's out-of-range fetch error (``auto_offset_reset="none"``)."""
    (tp, offset), *_ = exc.args[0].items()
    why = f"committed offset {offset} is no longer in the log (retention, or a recreated topic)"
    return StartPointRequiredError(_start_point_message(group, tp, why))


def _start_point_message(group: str, tp: TopicPartition, why: str) -> str:
    return (
        f"consumer group {group!r}, {tp.topic}[{tp.partition}]: {why}. The subscriber never "
        "picks a start point by itself. Choose one and set it, with the group stopped: "
        f"headwater offsets reset --group {group} --topic {tp.topic} "
        "--to earliest|latest|timestamp|offset [--value V] --execute "
        "(or pass start='earliest'/'latest' for a brand-new group)"
    )
