"""The command parts of one ingest replica: book, feed, relay, delivery, expiry, metrics.

``IngestServer`` builds one when commands are enabled and adds :meth:`rpc_handler` next
to the servicer's; that is the whole hook into the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from typing import Any

import grpc
from opentelemetry.metrics import Meter

from headwater.commands import model
from headwater.ingest.admission.auth import Authenticator, Gateway
from headwater.ingest.writers.protocol import RecordWriter
from headwater.kafka.settings import KafkaSettings
from headwater.proto.commands.v1.command_pb2 import Command
from headwater.proto.commands.v1.command_status_pb2 import CommandState, CommandStatus
from headwater.topics import (
    COMMAND_OWNERS_TOPIC,
    COMMAND_REPORTS_TOPIC,
    COMMAND_STATUS_TOPIC,
    COMMANDS_TOPIC,
)

from .book import CommandBook, Entry
from .delivery import CommandDelivery
from .feed import CommandFeed
from .leases import Lease
from .metrics import CommandMetrics
from .owners import OwnerBook
from .relay import ReportsOffsetLostError, StatusRelay
from .settings import CommandSettings

log = logging.getLogger(__name__)


class CommandService:
    """Runs the command parts of a replica (see the module docstring)."""

    def __init__(
        self,
        settings: CommandSettings,
        kafka: KafkaSettings,
        writer: RecordWriter,
        authenticator: Authenticator,
        meter: Meter,
        stream_slot: Callable[[Gateway], AbstractContextManager[None]] | None = None,
    ) -> None:
        self.settings = settings
        self._writer = writer
        self.book = CommandBook(settings.remembered_ids)
        prefix = settings.topic_prefix
        self._status_topic = prefix + COMMAND_STATUS_TOPIC
        self._owners_topic = prefix + COMMAND_OWNERS_TOPIC
        # Unique per process: a restarted replica must not take the leases of its former
        # self for its own (it has not written what they cover).
        replica = f"{settings.relay_instance_id or socket.gethostname()}-{uuid.uuid4().hex[:8]}"
        self.owners = OwnerBook(
            settings.owner_grace_seconds,
            replica,
            self._write_lease,
            self.book.oldest_offset,
            self._owner_changed,
        )
        self.feed = CommandFeed(
            kafka,
            self.book,
            prefix + COMMANDS_TOPIC,
            self._status_topic,
            self._owners_topic,
            self._read,
            self._refused,
            self.owners.read,
        )
        self.delivery = CommandDelivery(
            settings,
            self.book,
            self.owners,
            authenticator,
            self.feed.caught_up,
            self._delivered,
            self._outcome,
            stream_slot,
        )
        self.metrics = CommandMetrics(meter, self.book, self.owners, self.delivery)
        self.relay = StatusRelay(
            kafka,
            writer,
            self.book,
            self.feed,
            COMMAND_REPORTS_TOPIC,
            self._status_topic,
            settings.relay_group,
            self._relayed,
            settings.relay_session_timeout_seconds,
            settings.relay_instance_id,
        )
        self._tasks: list[asyncio.Task[None]] = []
        #: Statuses this replica writes from its streams (DELIVERED on an ack, outcomes),
        #: and their wake-up.
        self._to_write: list[CommandStatus] = []
        self._to_write_wake = asyncio.Event()
        #: Commands that failed the checks of delivery, with (reason, message).
        self._to_reject: list[tuple[Command, str, str]] = []
        self._to_reject_wake = asyncio.Event()

    def rpc_handler(self) -> grpc.GenericRpcHandler:
        """The ReceiveCommands handler."""
        return self.delivery.rpc_handler()

    def start(self) -> None:
        """Start reading, relaying and expiring in the background."""
        self._tasks = [
            # Run again after a failure: the same book, read again from the start (adding a
            # known command or applying a known status again changes nothing).
            asyncio.create_task(_again(self.feed.run, "feed")),
            asyncio.create_task(_again(self.relay.run, "relay")),
            asyncio.create_task(_logged(self._expire_forever(), "expiry")),
            asyncio.create_task(_logged(self._write_statuses_forever(), "stream statuses")),
            asyncio.create_task(_logged(self._reject_forever(), "rejections")),
            asyncio.create_task(_logged(self.owners.keep_forever(), "leases")),
        ]

    async def stop(self) -> None:
        """Release the leases held here, then stop the background work.

        The streams end with the gRPC server; a stopping replica sends no new command.
        """
        try:
            await asyncio.wait_for(self.owners.release_all(), _RELEASE_WITHIN_S)
        except TimeoutError:  # they lapse after the grace instead
            log.warning("device commands leases not released at stop")
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _write_lease(self, lease: Lease) -> asyncio.Future[Any]:
        return await self._writer.send(self._owners_topic, lease.key(), lease.encode(), [])

    def _read(self, command: Command, new: bool) -> None:
        (self.metrics.queued if new else self.metrics.duplicates).add(1)

    def _owner_changed(self, device: tuple[str, str], previous: str, owner: str) -> None:
        self.metrics.owner_changes.add(1, {"kind": "failover" if previous else "first"})
        log.info(
            "device commands owner changed",
            extra={
                "tenant": device[0],
                "device_id": device[1],
                "previous_gateway": previous,
                "gateway": owner,
            },
        )

    def _refused(self, command: Command, reason: str, message: str) -> None:
        self._to_reject.append((command, reason, message))
        self._to_reject_wake.set()

    async def _reject_forever(self) -> None:
        """Write REJECTED for the commands that failed the checks of delivery.

        Only once the book is caught up: a command rejected before this replica started
        has its REJECTED on the status topic, and is not rejected (written) again. Every
        replica reads every command, so REJECTED may be written once per replica.
        """
        await self.feed.caught_up.wait()
        while True:
            await self._to_reject_wake.wait()
            self._to_reject_wake.clear()
            refused, self._to_reject = self._to_reject, []
            for command, reason, message in refused:
                key = (command.tenant, command.device_id, command.command_id)
                if self.book.known(key):  # rejected before, or the id was delivered
                    continue
                self.book.finish(key, CommandState.COMMAND_STATE_REJECTED)
                self.metrics.refused.add(1, {"reason": reason})
                log.warning(
                    "a command on the commands topic fails the checks of delivery; REJECTED",
                    extra={"command_id": command.command_id, "reason": reason, "detail": message},
                )
                self._write(
                    model.status_of(
                        command,
                        CommandState.COMMAND_STATE_REJECTED,
                        reason=f"{reason}: {message}"[:1024],
                    )
                )

    def _delivered(self, entry: Entry, gateway_id: str) -> None:
        self.metrics.delivered.add(1)
        self.metrics.delivery_duration.record(max(0.0, (model.now_ms() - entry.created_ms) / 1000))
        self._write(
            model.status_of(
                entry.command, CommandState.COMMAND_STATE_DELIVERED, gateway_id=gateway_id
            )
        )

    def _outcome(self, status: CommandStatus, reason: str) -> None:
        self.metrics.outcomes.add(1, {"state": model.state_name(status.state), "reason": reason})
        if not reason:
            self._write(status)

    def _write(self, status: CommandStatus) -> None:
        self._to_write.append(status)
        self._to_write_wake.set()

    async def _write_statuses_forever(self) -> None:
        """Write the statuses this replica learnt on its streams, as soon as it learnt them.

        DELIVERED when a gateway acknowledges (the command is in its spool: what DELIVERED
        means) and the outcome when a gateway sends it (its handler returned). Written
        here, each is on the topic a produce after the gateway said so, instead of after
        the gateway's own report has gone through its spooled sender, ingest's reports
        topic and the relay (the DELIVERED and EXECUTED p99 of the benchmark). The gateway
        still reports both: those reports are the durable copies (a write here is lost if
        the replica dies first, and a gateway whose stream is down sends no outcome on
        it), so a reader sees a state once or twice and folds repeats.
        """
        while True:
            await self._to_write_wake.wait()
            self._to_write_wake.clear()
            statuses, self._to_write = self._to_write, []
            for status in statuses:
                try:
                    written = await self._writer.send(
                        self._status_topic,
                        model.command_key(status),
                        status.SerializeToString(),
                        [],
                    )
                except Exception as exc:  # the gateway's own report follows
                    _not_written(status, exc)
                    continue
                written.add_done_callback(functools.partial(_check_written, status))

    def _relayed(self, status: CommandStatus | None, reason: str) -> None:
        state = model.state_name(status.state) if status is not None else ""
        self.metrics.reports.add(1, {"state": state, "reason": reason})

    async def _expire_forever(self) -> None:
        """Mark commands past their expiry EXPIRED (every replica does; see docs)."""
        await self.feed.caught_up.wait()
        while True:
            for entry in self.book.take_expired(model.now_ms()):
                status = model.status_of(
                    entry.command,
                    CommandState.COMMAND_STATE_EXPIRED,
                    reason="NOT_DELIVERED_BEFORE_EXPIRY",
                )
                try:
                    await self._writer.send(
                        self._status_topic,
                        model.command_key(entry.command),
                        status.SerializeToString(),
                        [],
                    )
                except Exception as exc:  # the next replica's check, or our restart, retries
                    log.warning(
                        "cannot write an EXPIRED status",
                        extra={"command_id": entry.command.command_id, "error": repr(exc)},
                    )
                self.metrics.expired.add(1)
                log.info(
                    "command expired before delivery",
                    extra={
                        "command_id": entry.command.command_id,
                        "device_id": entry.command.device_id,
                        "tenant": entry.command.tenant,
                    },
                )
            await asyncio.sleep(self.settings.expiry_check_seconds)


#: How long a stopping replica waits for its leases' release records.
_RELEASE_WITHIN_S = 2.0


def _check_written(status: CommandStatus, written: asyncio.Future[Any]) -> None:
    if not written.cancelled() and written.exception() is not None:
        _not_written(status, written.exception())


#: Failed writes of stream statuses not logged yet, and when the last warning was logged.
_unwritten = {"count": 0, "logged_at": 0.0}
#: A broker outage fails every write: one warning (with the count) this often at most.
_UNWRITTEN_LOG_EVERY_S = 10.0


def _not_written(status: CommandStatus, exc: BaseException | None) -> None:
    _unwritten["count"] += 1
    now = time.monotonic()
    if now - _unwritten["logged_at"] < _UNWRITTEN_LOG_EVERY_S:
        return
    log.warning(
        "cannot write command statuses learnt on streams; the gateways' reports will",
        extra={
            "command_id": status.command_id,
            "state": model.state_name(status.state),
            "error": repr(exc),
            "failed_since_last_warning": _unwritten["count"],
        },
    )
    _unwritten["count"], _unwritten["logged_at"] = 0, now


async def _again(run: Callable[[], Awaitable[None]], name: str) -> None:
    """Run ``run`` again after a failure: a new consumer resumes from the committed offsets.

    The relay commits only what it wrote, so a failure (the producer not connected yet, a
    broker outage) means the uncommitted reports are read again, not lost. A lost committed
    offset is not retried: a person chooses the start point (ReportsOffsetLostError).
    """
    delay = 0.5
    while True:
        try:
            await run()
        except asyncio.CancelledError:
            raise
        except ReportsOffsetLostError as exc:
            # Started again it would fail again, and a warning every few seconds would
            # bury the one thing to do: one error line with it, and the part stays stopped.
            log.error("command %s stopped: %s", name, exc, extra={"part": name})
            return
        except Exception as exc:
            log.warning(
                "command %s failed; starting it again",
                name,
                extra={"part": name, "error": f"{type(exc).__name__}: {exc}", "retry_in_s": delay},
            )
            await asyncio.sleep(delay)
            delay = min(delay * 2, 10.0)


async def _logged(work: object, name: str) -> None:
    """Run a background coroutine; log (not swallow silently) how it ended."""
    try:
        await work  # type: ignore[misc]
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("command %s stopped", name, extra={"part": name})
        raise
