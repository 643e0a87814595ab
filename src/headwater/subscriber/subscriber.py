"""At-least-once consumption of Headwater's completion events and common-format events.

A ``Subscriber`` hands each record, decoded into the generated class, to an async handler
and commits a partition's offset only past records that are done: handled, recognised as a
duplicate (by a stable id in a dedup store), or parked. Records of a partition are done in
order, so a commit never passes a record that is still being retried. A handler that keeps
failing is retried with backoff a bounded number of times, then the record is parked on
the subscriber's own dead-letter topic with the error, and the partition moves on; an
undecodable record is parked at once.

Offsets are never reset implicitly: a partition without a committed offset, or whose
offset is no longer in the log, stops the subscriber with StartPointRequiredError, which
says how to choose a start point with ``headwater offsets reset``. That is checked before
the group is joined (``startpoints``) and again while consuming. ``start`` is the explicit
opt-in for a partition the group has never committed (a first run); the chosen offset is
committed at once, so the choice is made once and not again at every rebalance.

Cancelling ``run`` instead of setting its stop event also leaves the group, but abandons
the record in hand uncommitted (it comes again).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Iterable
from contextlib import AsyncExitStack
from typing import Generic

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka import errors as kafka_errors
from aiokafka.structs import ConsumerRecord
from opentelemetry.metrics import Meter

from headwater.kafka.settings import KafkaSettings
from headwater.subscriber.errors import StartPointRequiredError
from headwater.subscriber.leaders import LeaderMoves
from headwater.subscriber.messages import Decoder, Delivery, Handler, M
from headwater.subscriber.metrics import SubscriberMetrics
from headwater.subscriber.parking import Parker
from headwater.subscriber.seen import DedupStore, MemoryDedup
from headwater.subscriber.settings import SubscriberSettings
from headwater.subscriber.startpoints import check_start_points

log = logging.getLogger(__name__)

_POLL_MS = 300


class Subscriber(Generic[M]):
    """Consume ``settings.topics`` as consumer group ``settings.group_id``.

    No I/O happens before ``run``. ``decoder`` picks the message type (``decode_completion``
    or ``decode_event``, or your own); ``dedup`` defaults to an in-memory LRU, which forgets
    at a restart: use ``SqliteDedup`` when a restart must not repeat side effects.
    """

    def __init__(
        self,
        kafka: KafkaSettings,
        settings: SubscriberSettings,
        handler: Handler[M],
        decoder: Decoder[M],
        dedup: DedupStore | None = None,
        meter: Meter | None = None,
    ) -> None:
        self.kafka = kafka
        self.settings = settings
        self.metrics = SubscriberMetrics(settings.group_id, meter)
        self._handler = handler
        self._decoder = decoder
        self._dedup: DedupStore = dedup if dedup is not None else MemoryDedup()
        # Held while a batch is handled and committed; a rebalance waits for it, so the
        # partitions are handed over with everything done committed.
        self._batch_lock = asyncio.Lock()
        self._revoking = False
        # Partitions whose position was checked against the log since the last assignment.
        # The next offset to handle per partition, for the lag.
        self._next: dict[TopicPartition, int] = {}
        # Bumped at every rebalance: a batch fetched before one is dropped, not handled.
        self._generation = 0
        self._leader_moves = LeaderMoves(settings.group_id)

    @property
    def counts(self) -> dict[str, int]:
        """Records done so far by result: handled, duplicate, parked."""
        return self.metrics.counts

    async def run(self, stop: asyncio.Event) -> None:
        """Consume until ``stop`` is set: finish the current record, commit, leave the group.

        Raises StartPointRequiredError when a partition has no usable committed offset,
        DeadLetterTopicError when the dead-letter topic cannot be reached at start.
        """
        s = self.settings
        await check_start_points(self.kafka, s)  # before joining: a failure disturbs nobody
        parker = Parker(self.kafka, s.dead_letter, s.group_id)
        async with AsyncExitStack() as stack:
            await parker.start()
            stack.push_async_callback(parker.stop)
            consumer = AIOKafkaConsumer(
                group_id=s.group_id,
                enable_auto_commit=False,
                # Never a reset the library picks: missing or lost offsets raise instead.
                auto_offset_reset="none",
                max_poll_interval_ms=int(s.max_poll_interval_s * 1000),
                session_timeout_ms=int(s.session_timeout_s * 1000),
                heartbeat_interval_ms=int(s.session_timeout_s * 1000 / 3),
                **self.kafka.aiokafka_config(f"headwater-subscriber-{s.group_id}"),
            )
            await consumer.start()
            # Stopping leaves the group, so a rebalance hands the partitions on at once.
            stack.push_async_callback(consumer.stop)
            consumer.subscribe(list(s.topics), listener=_Handover(self))
            log.info(
                "subscriber started",
                extra={"group": s.group_id, "topics": list(s.topics), "parking": parker.topic},
            )
            await self._consume(consumer, parker, stop)
        log.info("subscriber stopped", extra={"group": s.group_id, "counts": self.counts})

    async def _consume(
        self, consumer: AIOKafkaConsumer, parker: Parker, stop: asyncio.Event
    ) -> None:
        while not stop.is_set():
            try:
                batches = await consumer.getmany(
                    timeout_ms=_POLL_MS, max_records=self.settings.max_batch
                )
            except kafka_errors.NoOffsetForPartitionError as exc:
                await self._start_new_partition(consumer, exc.args[0])
                continue
            except kafka_errors.OffsetOutOfRangeError as exc:
                (tp, offset), *_ = exc.args[0].items()
                raise await self._out_of_range(consumer, tp, offset) from None
            fetched_in = self._generation
            async with self._batch_lock:
                if self._generation != fetched_in:
                    continue  # partitions moved meanwhile: the new owners get these records
                for tp, records in batches.items():
                    if stop.is_set() or self._revoking:
                        break
                    await self._handle_partition(consumer, parker, stop, tp, records)
            self._after_poll(consumer)

    async def _handle_partition(
        self,
        consumer: AIOKafkaConsumer,
        parker: Parker,
        stop: asyncio.Event,
        tp: TopicPartition,
        records: list[ConsumerRecord[bytes, bytes]],
    ) -> None:
        done: int | None = None
        for record in records:
            # Stopping or handing over: what is not done is not committed and comes again
            # (to this group's next owner of the partition).
            if stop.is_set() or self._revoking:
                break
            if not await self._process(record, parker, stop):
                break
            done = record.offset + 1
        if done is None:
            return
        try:
            await consumer.commit({tp: done})
        except (kafka_errors.CommitFailedError, kafka_errors.IllegalStateError) as exc:
            # The partition moved to another member while this batch was handled (it took
            # longer than the rebalance timeout): the new owner gets these records again
            # and the dedup store and idempotent writes absorb them.
            log.warning(
                "commit failed after a rebalance; the records will be delivered again",
                extra={"topic": tp.topic, "partition": tp.partition, "error": repr(exc)},
            )
            return
        self._next[tp] = done

    def _after_poll(self, consumer: AIOKafkaConsumer) -> None:
        """Update the lag and tell leader moves (one line each) of the assigned partitions."""
        assigned = consumer.assignment()
        self._leader_moves.check(consumer._client.cluster, assigned)  # no public accessor
        # From the high watermark of the last fetch: exact on every broker we know.
        for tp in assigned:
            high, next_offset = consumer.highwater(tp), self._next.get(tp)
            if high is not None and next_offset is not None:
                self.metrics.lag[(tp.topic, tp.partition)] = max(0, high - next_offset)

    async def _process(
        self, record: ConsumerRecord[bytes, bytes], parker: Parker, stop: asyncio.Event
    ) -> bool:
        """Handle, skip or park ``record``; return False if it is not done (stopping)."""
        try:
            message, key = self._decoder(record.value or b"")
        except Exception as exc:  # undecodable: it never will be; park it at once
            await parker.park(record, exc, 0)
            self.metrics.done(record.topic, "parked")
            return True
        if self._dedup.seen(key):
            self.metrics.done(record.topic, "duplicate")
            return True
        delivery = Delivery(
            message,
            key,
            record.topic,
            record.partition,
            record.offset,
            record.key,
            tuple(record.headers or ()),
        )
        s = self.settings
        for attempt in range(1, s.max_attempts + 1):
            started = time.perf_counter()
            try:
                if s.handler_timeout_s:
                    await asyncio.wait_for(self._handler(delivery), s.handler_timeout_s)
                else:
                    await self._handler(delivery)
            except Exception as exc:
                self.metrics.handler_call(record.topic, time.perf_counter() - started)
                if attempt == s.max_attempts:
                    await parker.park(record, exc, attempt)
                    self.metrics.done(record.topic, "parked")
                    return True
                self.metrics.retried(record.topic, type(exc).__name__)
                delay = random.uniform(
                    0, min(s.backoff_max_s, s.backoff_initial_s * 2 ** (attempt - 1))
                )
                log.warning(
                    "handler failed; retrying",
                    extra={
                        "key": key,
                        "source": f"{record.topic}/{record.partition}@{record.offset}",
                        "attempt": attempt,
                        "error": repr(exc)[:200],
                        "retry_in_s": round(delay, 3),
                    },
                )
                if await _stopped_within(stop, delay):
                    return False
            else:
                self.metrics.handler_call(record.topic, time.perf_counter() - started)
                self._dedup.record(key)
                self.metrics.done(record.topic, "handled")
                return True
        raise AssertionError("unreachable: the last attempt parks or returns")

    async def _start_new_partition(self, consumer: AIOKafkaConsumer, tp: TopicPartition) -> None:
        start = self.settings.start
        if start is None:
            raise StartPointRequiredError(
                self.settings.group_id, tp.topic, tp.partition, "no committed offset"
            )
        if start == "earliest":
            await consumer.seek_to_beginning(tp)
        else:
            await consumer.seek_to_end(tp)
        position = await consumer.position(tp)
        log.warning(
            "no committed offset: starting where the caller said (start=%s)",
            start,
            extra={"topic": tp.topic, "partition": tp.partition, "offset": position},
        )
        self._next[tp] = position
        # Committed now: the choice is made once, not again after a rebalance or restart.
        try:
            await consumer.commit({tp: position})
        except (kafka_errors.CommitFailedError, kafka_errors.IllegalStateError) as exc:
            log.warning("could not commit the start point yet", extra={"error": repr(exc)})

    async def _out_of_range(
        self, consumer: AIOKafkaConsumer, tp: TopicPartition, offset: int
    ) -> StartPointRequiredError:
        """Say which way the committed offset left the log (Kafka answers both alike)."""
        end = (await consumer.end_offsets([tp]))[tp]
        if offset > end:
            why = f"is past the log end ({end})"
        else:
            start = (await consumer.beginning_offsets([tp]))[tp]
            why = f"is no longer in the log (it now starts at {start})"
        return StartPointRequiredError(
            self.settings.group_id,
            tp.topic,
            tp.partition,
            f"the group's offset {offset} {why}; the records in between may be lost "
            "(retention, or a recreated topic)",
        )


class _Handover(ConsumerRebalanceListener):  # type: ignore[misc]
    """Make a rebalance wait until the batch in hand is done up to its current record."""

    def __init__(self, subscriber: Subscriber[M]) -> None:
        self._sub = subscriber

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self._sub._generation += 1
        self._sub._revoking = True
        try:
            async with self._sub._batch_lock:  # the batch stops and commits what is done
                pass
        finally:
            self._sub._revoking = False
        for tp in revoked:
            self._sub.metrics.lag.pop((tp.topic, tp.partition), None)
            self._sub._next.pop(tp, None)
        if revoked:
            log.info("partitions revoked", extra={"partitions": _names(revoked)})

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self._sub._generation += 1
        log.info("partitions assigned", extra={"partitions": _names(assigned)})


def _names(tps: Iterable[TopicPartition]) -> list[str]:
    return sorted(f"{tp.topic}[{tp.partition}]" for tp in tps)


async def _stopped_within(stop: asyncio.Event, seconds: float) -> bool:
    """Wait ``seconds`` unless ``stop`` is set first; return whether it was."""
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except TimeoutError:
        return False
    return True
