"""Keep the book up to date: read commands.v1, command-status.v1 and command-owners.v1.

Partitions are assigned, never a group joined: every replica reads everything (that is
how a replica learns the commands of whichever gateway connects to it, and every
device's lease). The book is "caught up" once the end offsets seen at start are reached;
delivery waits for that, so a restarted replica does not resend commands whose DELIVERED
it has not read yet, nor claim a device whose lease it has not read.
Afterwards the relay can ask for the commands written so far (``read_commands_to_end``):
a gateway's report can reach this replica before the command it reports on does.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from typing import Any

from google.protobuf.message import DecodeError

from headwater.errors import HeadwaterError
from headwater.kafka.settings import KafkaSettings
from headwater.proto.commands.v1.command_pb2 import Command
from headwater.proto.commands.v1.command_status_pb2 import CommandStatus

from .book import CommandBook
from .checks import delivery_refusal
from .leases import Lease

log = logging.getLogger(__name__)
CLIENT_ROLE = "headwater-ingest-commands"
#: Records taken per poll of the consumer.
_BATCH = 500


class CommandFeed:
    """Reads the three topics into the book and the leases until cancelled (module docstring)."""

    def __init__(
        self,
        kafka: KafkaSettings,
        book: CommandBook,
        commands_topic: str,
        status_topic: str,
        owners_topic: str,
        on_command: Any = None,
        on_refused: Any = None,
        on_lease: Any = None,
    ) -> None:
        self._kafka = kafka
        self._book = book
        self._commands_topic = commands_topic
        self._status_topic = status_topic
        self._owners_topic = owners_topic
        #: Called with each lease read from the owners topic, in log order (owners.py).
        self._on_lease = on_lease or (lambda _lease: None)
        self._on_command = on_command or (lambda _command, _new: None)
        #: Called with (command, reason, message) for a command that fails the checks of
        #: delivery (checks.py): it never enters the book.
        self._on_refused = on_refused or (lambda _command, _reason, _message: None)
        #: Set once the ends seen at start are read.
        self.caught_up = asyncio.Event()
        self._consumer: Any = None
        #: Next offset to read, per commands partition.
        self._next: dict[int, int] = {}
        #: Set (and replaced) after every poll, so waiters look at ``_next`` again.
        self._progress = asyncio.Event()

    async def run(self) -> None:
        """Read until cancelled; retry while the topics do not exist."""
        from confluent_kafka import Consumer

        consumer = Consumer(
            self._kafka.consumer_config(CLIENT_ROLE, f"{CLIENT_ROLE}-{uuid.uuid4().hex[:8]}")
            | {"enable.partition.eof": False}
            # Never a jump the client picks (its default is the log's end: every command
            # still there skipped, silently): a position retention deleted is reported and
            # the book goes on from the log's start (_read_on_after_deleted).
            | {"auto.offset.reset": "error"}
        )
        try:
            ends = await self._assign(consumer)
            self._consumer = consumer
            if not ends:
                self.caught_up.set()
            while True:
                try:
                    batch = await asyncio.to_thread(_poll, consumer)
                except OffsetOutOfRangeError as gone:
                    await asyncio.to_thread(self._read_on_after_deleted, consumer, gone, ends)
                    continue
                for msg in batch:
                    self._take(msg)
                    if msg.topic() == self._commands_topic:
                        self._next[msg.partition()] = msg.offset() + 1
                    end = ends.get((msg.topic(), msg.partition()))
                    if end is not None and msg.offset() + 1 >= end:
                        del ends[(msg.topic(), msg.partition())]
                        if not ends:
                            self.caught_up.set()
                            log.info("command book caught up", extra={"waiting": self._book.size})
                self._progress.set()
                self._progress = asyncio.Event()
        finally:
            self._consumer = None
            await close_soon(consumer)

    async def read_commands_to_end(self, within_s: float = 10.0) -> bool:
        """Wait until every command written before this call is in the book.

        False if that takes longer than ``within_s`` (the topics are not readable, or the
        feed is far behind). The end offsets are asked of the broker now, not cached.
        """
        from confluent_kafka import TopicPartition

        loop = asyncio.get_running_loop()
        deadline = loop.time() + within_s
        try:
            await asyncio.wait_for(self.caught_up.wait(), within_s)
        except TimeoutError:
            return False
        consumer = self._consumer
        if consumer is None:
            return False

        def high_watermarks() -> dict[int, int]:
            return {
                p: consumer.get_watermark_offsets(
                    TopicPartition(self._commands_topic, p), within_s, False
                )[1]
                for p in list(self._next)
            }

        ends = await asyncio.to_thread(high_watermarks)
        while any(self._next.get(p, 0) < end for p, end in ends.items()):
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            try:
                await asyncio.wait_for(self._progress.wait(), remaining)
            except TimeoutError:
                return False
        return True

    def _read_on_after_deleted(
        self, consumer: Any, gone: OffsetOutOfRangeError, ends: dict[tuple[str, int], int]
    ) -> None:
        """Go on from the log's start after records were deleted before this feed read them.

        The feed fell further behind than the topic's retention (a replica stalled, or
        retention is short): what was deleted is gone for every reader, so the book can only
        go on from what is left, and says so once, loudly.
        """
        from confluent_kafka import TopicPartition

        tp = TopicPartition(gone.topic, gone.partition)
        low, _ = consumer.get_watermark_offsets(tp, timeout=10, cached=False)
        log.warning(
            "%s[%d]: records before offset %d were deleted (retention) before this replica "
            "read them; the commands, reports or leases in them are not in its book. It "
            "reads on from there. Keep the command topics' retention.ms longer than a "
            "replica can fall behind",
            gone.topic,
            gone.partition,
            low,
            extra={"topic": gone.topic, "partition": gone.partition, "offset": low},
        )
        # Assigned again at the start (a seek is refused in the partition's error state).
        consumer.incremental_unassign([tp])
        consumer.incremental_assign([TopicPartition(gone.topic, gone.partition, low)])
        if gone.topic == self._commands_topic:
            self._next[gone.partition] = low
        end = ends.get((gone.topic, gone.partition))
        if end is not None and low >= end:  # what it had to read to catch up is gone
            del ends[(gone.topic, gone.partition)]
            if not ends:
                self.caught_up.set()

    async def _assign(self, consumer: Any) -> dict[tuple[str, int], int]:
        """Assign every partition of the three topics from the start; return the non-empty ends.

        Retried while the topics are missing or their partitions have no leader yet (just
        created, or a broker moving leaders): the book waits, ingest serves meanwhile.
        """
        from confluent_kafka import KafkaException, TopicPartition

        delay = 1.0
        while True:
            try:
                found = await asyncio.to_thread(self._partitions, consumer)
                if found is not None:
                    ends: dict[tuple[str, int], int] = {}
                    assignment = []
                    for topic, partition in found:
                        tp = TopicPartition(topic, partition)
                        low, high = await asyncio.to_thread(consumer.get_watermark_offsets, tp, 10)
                        assignment.append(TopicPartition(topic, partition, low))
                        if topic == self._commands_topic:
                            self._next[partition] = low
                        if high > low:
                            ends[(topic, partition)] = high
                    consumer.assign(assignment)
                    return ends
                problem = "missing"
            except KafkaException as exc:
                problem = str(exc.args[0]) if exc.args else repr(exc)
            log.warning(
                "command topics missing or not ready; commands cannot be delivered until they "
                "are. Create them with `headwater topics ensure`",
                extra={
                    "topics": [self._commands_topic, self._status_topic, self._owners_topic],
                    "problem": problem,
                    "retry_in_s": delay,
                },
            )
            await asyncio.sleep(delay)
            delay = min(delay * 2, 30.0)

    def _partitions(self, consumer: Any) -> list[tuple[str, int]] | None:
        found = []
        for topic in (self._commands_topic, self._status_topic, self._owners_topic):
            metadata = consumer.list_topics(topic, timeout=10).topics.get(topic)
            if metadata is None or metadata.error is not None:
                return None
            found += [(topic, p) for p in metadata.partitions]
        return found

    def _take(self, msg: Any) -> None:
        value = msg.value()
        if not value:
            return
        if msg.topic() == self._owners_topic:
            self._read_lease(msg)
            return
        try:
            if msg.topic() == self._commands_topic:
                command = Command.FromString(value)
                key = (command.tenant, command.device_id, command.command_id)
                refusal = None if self._book.known(key) else delivery_refusal(command, msg.key())
                if refusal is not None:
                    self._on_refused(command, *refusal)
                    return
                self._on_command(command, self._book.add(command, msg.offset()))
            else:
                self._book.apply(CommandStatus.FromString(value))
        except DecodeError:
            log.warning(
                "skipping a record that is not a command or a command status",
                extra={"topic": msg.topic(), "partition": msg.partition(), "offset": msg.offset()},
            )

    def _read_lease(self, msg: Any) -> None:
        try:
            lease = Lease.decode(msg.value())
        except DecodeError:
            log.warning(
                "skipping a record that is not a device commands lease",
                extra={"topic": msg.topic(), "partition": msg.partition(), "offset": msg.offset()},
            )
            return
        self._on_lease(lease)


#: How long a replica's shutdown waits for a command consumer to close.
CLOSE_WITHIN_S = 1.0


async def close_soon(consumer: Any, within_s: float = CLOSE_WITHIN_S) -> None:
    """Close ``consumer`` on a daemon thread, waiting for it at most ``within_s``.

    A group member's close waits for its group (a rebalance in progress because a replica
    was killed, a coordinator that is away): measured at 5 s in the suite. That must not
    hold a draining replica past its grace; if the close does not finish, the group
    notices the member gone at its session timeout, and nothing is lost (the relay commits
    only what it wrote; the feed commits nothing).
    """
    closed = threading.Event()

    def close() -> None:
        try:
            consumer.close()
        except Exception:  # the process is stopping; the group copes either way
            log.debug("command consumer close failed", exc_info=True)
        finally:
            closed.set()

    threading.Thread(target=close, name="command-consumer-close", daemon=True).start()
    if not await asyncio.to_thread(closed.wait, within_s):
        log.warning(
            "a command consumer did not close within %.1f s; its group sees it leave at its "
            "session timeout",
            within_s,
        )


def _poll(consumer: Any) -> list[Any]:
    """Wait for the first record (up to 0.5 s), then take what else is there at once.

    ``consume(n, timeout)`` would wait for n records or the whole timeout: delivery
    latency. ``poll`` returns as soon as one arrives.
    """
    first = consumer.poll(0.5)
    if first is None:
        return []
    batch = [first, *consumer.consume(_BATCH - 1, 0)]
    for m in batch:
        if m.error():
            from confluent_kafka import KafkaError

            if m.error().code() == KafkaError._AUTO_OFFSET_RESET:  # auto.offset.reset=error
                raise OffsetOutOfRangeError(m.topic(), m.partition())
    # Other errors are informational here (a broker away): the client retries by itself.
    return [m for m in batch if not m.error()]


class OffsetOutOfRangeError(HeadwaterError):
    """A consumer with ``auto.offset.reset=error`` found its position missing from the log.

    Raised to its caller, which decides: the relay stops (ReportsOffsetLostError: a person
    chooses where its group goes on); the feed reads on from the log's start.
    """

    def __init__(self, topic: str, partition: int) -> None:
        super().__init__(f"{topic}[{partition}]: offset out of range")
        self.topic, self.partition = topic, partition
