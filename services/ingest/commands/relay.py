"""Relay gateways' command reports to command-status.v1.

Gateways report DELIVERED, EXECUTED, FAILED and REJECTED as ordinary device messages on
the command-status endpoint (so they are spooled and retried like telemetry); ingest
writes those to ingest.command-status.v1 keyed by device id. The relay reads them (one
consumer group over all replicas: each report relayed once, at least once), checks them
and writes the CommandStatus keyed ``<tenant>/<device_id>`` next to the QUEUED and
EXPIRED records of the same command, so one partition holds a command's whole life.

Checked: the payload is a CommandStatus; its device is the message's device (ingest
already refused a message for a device not bound to the gateway); the tenant and gateway
are taken from the record headers ingest wrote, never from the payload; the command is
one the book knows. Anything else is dropped with a warning and counted.

A report can reach this replica's relay before its command reaches this replica's book
(another replica delivered it; the feed here is a moment behind): before a report is
dropped as unknown, the relay waits for the book to read the commands written so far.

Offsets are never reset by the client: a partition the group never committed starts at
the log's beginning (every report is relayed), and a committed offset that is no longer in
the log (retention deleted reports the group had not relayed, or the topic was recreated)
stops the relay with ReportsOffsetLostError, which says how to choose a start point.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Any

from google.protobuf.message import DecodeError

from headwater import record_headers as rh
from headwater.commands import model
from headwater.endpoints import COMMAND_STATUS_CONTENT_TYPE
from headwater.errors import HeadwaterError
from headwater.ingest.writers.protocol import RecordWriter
from headwater.kafka.settings import KafkaSettings
from headwater.proto.commands.v1.command_status_pb2 import CommandState, CommandStatus
from headwater.proto.device.v1.device_message_pb2 import DeviceMessage

from .book import CommandBook
from .feed import CLIENT_ROLE, CommandFeed, OffsetOutOfRangeError, _poll, close_soon

log = logging.getLogger(__name__)
#: Batches written and not yet acked, at most; then the relay waits for the oldest.
_MAX_PENDING_BATCHES = 16
_UNKNOWN = "UNKNOWN_COMMAND"
#: States a gateway may report; QUEUED is the sender's to write.
_GATEWAY_STATES = frozenset(
    {
        CommandState.COMMAND_STATE_DELIVERED,
        CommandState.COMMAND_STATE_EXECUTED,
        CommandState.COMMAND_STATE_FAILED,
        CommandState.COMMAND_STATE_REJECTED,
        # A command delivered just before its expiry may expire in the gateway's spool
        # before it runs; the gateway then reports it EXPIRED instead of running it.
        CommandState.COMMAND_STATE_EXPIRED,
    }
)


class ReportsOffsetLostError(HeadwaterError):
    """The relay group's committed offset is no longer in the reports log; a person decides.

    Not retriable: started again, the relay would find the same offset missing. Its message
    is the one line an operator needs (what was lost, and the commands that move on).
    """

    def __init__(
        self, group: str, topic: str, partition: int, committed: int, low: int, high: int
    ) -> None:
        self.group, self.topic, self.partition = group, topic, partition
        if committed > high:
            where = f"past the log end {high}"
        elif committed < low:
            where = f"before the log start {low}"
        else:  # the read position left the log (say a recreated topic), not yet the commit
            where = f"in the log ({low}..{high}) but the relay's read position is not"
        super().__init__(
            f"command relay group {group!r}, {topic}[{partition}]: the committed offset "
            f"{committed} is {where} (retention deleted reports not yet relayed, or the topic "
            "was recreated); the relay never skips reports by itself and has stopped on this "
            "replica (ingest keeps serving). Outcomes in the gap may be missing from "
            "command-status.v1. With every replica's relay stopped, look "
            f"(headwater offsets show --group {group}), set a start point "
            f"(headwater offsets reset --group {group} --topic {topic} --to earliest "
            "--execute; see --help), then restart the ingest replicas"
        )


class StatusRelay:
    """Reads the reports topic and writes checked statuses (see the module docstring)."""

    def __init__(
        self,
        kafka: KafkaSettings,
        writer: RecordWriter,
        book: CommandBook,
        feed: CommandFeed,
        reports_topic: str,
        status_topic: str,
        group: str,
        on_relayed: Any = None,
        session_timeout_s: float = 6.0,
        instance_id: str = "",
    ) -> None:
        self._kafka = kafka
        self._writer = writer
        self._book = book
        self._feed = feed
        self._reports_topic = reports_topic
        self._status_topic = status_topic
        self._group = group
        # A replica killed (not leaving the group) holds its partitions until the group
        # gives up on it: with the client's default (45 s), the outcomes that gateways
        # reported while it was down showed up to 42.5 s after its restart. Static
        # membership lets the restarted replica take them back at once; the short session
        # bounds the wait when it does not come back under the same id.
        session_ms = int(session_timeout_s * 1000)
        self._membership: dict[str, Any] = {
            "session.timeout.ms": session_ms,
            "heartbeat.interval.ms": max(100, session_ms // 3),
        } | ({"group.instance.id": instance_id} if instance_id else {})
        #: Called with (status or None when dropped, reason).
        self._on_relayed = on_relayed or (lambda _status, _reason: None)

    async def run(self) -> None:
        """Relay until cancelled; offsets are committed after the statuses are acked.

        Pipelined: the next batch is read and written while the acks of the last ones are
        outstanding (waiting for each batch's acks before reading on added a broker round
        trip to every report that arrived meanwhile). Offsets are committed in read order,
        up to the last batch whose statuses, and all before it, are acked; a failed write
        ends the run, and the uncommitted reports are read again (at least once).
        """
        from confluent_kafka import Consumer

        consumer = Consumer(
            self._kafka.consumer_config(CLIENT_ROLE, self._group)
            # "error", never a reset the client picks: a committed offset that left the log
            # surfaces from the poll (OffsetOutOfRangeError); a new group's start is chosen in
            # _start_points.
            | {"auto.offset.reset": "error"}
            | self._membership
        )
        consumer.subscribe([self._reports_topic], on_assign=_start_points)
        #: Batches written, oldest first: (all acked, next offsets to commit).
        pending: deque[tuple[asyncio.Future[Any], dict[tuple[str, int], int]]] = deque()
        try:
            # Reports are checked against the book; before it is caught up, a report for
            # a command it has not read yet would look unknown.
            await self._feed.caught_up.wait()
            while True:
                try:
                    batch = await asyncio.to_thread(_poll, consumer)
                except OffsetOutOfRangeError as lost:
                    raise await self._lost(consumer, lost) from None
                if batch:
                    if len(pending) >= _MAX_PENDING_BATCHES:
                        await pending[0][0]  # the broker is behind: do not run away from it
                    pending.append(await self._relay(batch))
                self._commit_acked(consumer, pending)
        finally:
            for acked, _ in pending:  # not committed: read again by the next run
                if acked.done() and not acked.cancelled():
                    acked.exception()  # retrieved: the run's error is the one raised
                acked.cancel()
            await close_soon(consumer)

    async def _lost(self, consumer: Any, lost: OffsetOutOfRangeError) -> ReportsOffsetLostError:
        """The error naming the group's committed offset and what the log holds now."""
        from confluent_kafka import TopicPartition

        tp = TopicPartition(lost.topic, lost.partition)

        def look() -> tuple[int, int, int]:
            (committed,) = consumer.committed([tp], timeout=10)
            low, high = consumer.get_watermark_offsets(tp, timeout=10, cached=False)
            return committed.offset, low, high

        committed, low, high = await asyncio.to_thread(look)
        return ReportsOffsetLostError(self._group, lost.topic, lost.partition, committed, low, high)

    async def _relay(
        self, batch: list[Any]
    ) -> tuple[asyncio.Future[Any], dict[tuple[str, int], int]]:
        """Write the checked statuses of ``batch``; return (all acked, offsets to commit)."""
        checked = [self._check(msg) for msg in batch]
        if any(reason == _UNKNOWN for _, reason in checked):
            # Once for the batch: reports of commands written after this call cannot exist.
            await self._feed.read_commands_to_end()
            checked = [
                self._check(msg) if reason == _UNKNOWN else (status, reason)
                for msg, (status, reason) in zip(batch, checked, strict=True)
            ]
        futures = []
        offsets: dict[tuple[str, int], int] = {}
        for msg, (status, reason) in zip(batch, checked, strict=True):
            offsets[(msg.topic(), msg.partition())] = msg.offset() + 1
            if reason:
                self._drop(status, reason)
                continue
            assert status is not None
            self._book.apply(status)
            self._on_relayed(status, "")
            futures.append(
                await self._writer.send(
                    self._status_topic,
                    model.command_key(status),
                    status.SerializeToString(),
                    [],
                )
            )
        return asyncio.gather(*futures), offsets

    @staticmethod
    def _commit_acked(
        consumer: Any, pending: deque[tuple[asyncio.Future[Any], dict[tuple[str, int], int]]]
    ) -> None:
        """Commit the offsets of the acked batches at the head of ``pending``.

        A failed write raises here: the run ends without committing it (read again).
        """
        from confluent_kafka import TopicPartition

        offsets: dict[tuple[str, int], int] = {}
        while pending and pending[0][0].done():
            acked, batch_offsets = pending.popleft()
            acked.result()
            offsets |= batch_offsets
        if offsets:
            # Asynchronous: a commit lost to a crash means those reports are relayed again
            # (at least once, readers fold repeats); waiting for each would cap the rate.
            # A partition revoked meanwhile fails its commit: its new owner relays again.
            consumer.commit(
                offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()],
                asynchronous=True,
            )

    def _check(self, msg: Any) -> tuple[CommandStatus | None, str]:
        """(the status to write, "") or (what could be read of it, why it is dropped)."""
        headers = {k: v for k, v in (msg.headers() or []) if v is not None}
        try:
            envelope = DeviceMessage.FromString(msg.value() or b"")
            status = CommandStatus.FromString(envelope.payload)
        except DecodeError:
            return None, "NOT_A_COMMAND_STATUS"
        if envelope.content_type != COMMAND_STATUS_CONTENT_TYPE:
            return status, "WRONG_CONTENT_TYPE"
        if status.device_id != envelope.device_id:
            return status, "DEVICE_MISMATCH"
        if status.state not in _GATEWAY_STATES:
            return status, "STATE_NOT_REPORTABLE"
        status.tenant = headers.get(rh.TENANT, b"").decode()
        status.gateway_id = headers.get(rh.GATEWAY_ID, b"").decode()
        if not self._book.known((status.tenant, status.device_id, status.command_id)):
            return status, _UNKNOWN
        return status, ""

    def _drop(self, status: CommandStatus | None, reason: str) -> None:
        log.warning(
            "dropping a command report",
            extra={
                "reason": reason,
                "command_id": status.command_id if status else "",
                "device_id": status.device_id if status else "",
            },
        )
        self._on_relayed(None, reason)


def _start_points(consumer: Any, partitions: list[Any]) -> None:
    """Assign ``partitions`` at the group's committed offsets; never committed: the beginning.

    The one start the relay chooses by itself: a new group relays every report there is.
    A committed offset is kept as it is, even one the log no longer holds (the poll then
    fails with OffsetOutOfRangeError instead of the client jumping).
    """
    from confluent_kafka import OFFSET_BEGINNING, KafkaException

    committed = consumer.committed(partitions, timeout=10)
    for tp in committed:
        if tp.error is not None:  # unknown is not "never committed": raised, run again
            raise KafkaException(tp.error)
        if tp.offset < 0:  # OFFSET_INVALID: nothing committed
            tp.offset = OFFSET_BEGINNING
    consumer.assign(committed)
