"""Commands from the cloud: receive, keep in the spool, run with your handler, report.

A :class:`CommandReceiver` holds one ReceiveCommands stream to ingest. Each command is
written to the spool's ``commands`` table *and* a DELIVERED report is spooled in the same
transaction; only then is it acknowledged. So a command acknowledged is on disk, and a
command id delivered twice (at-least-once) is stored and run once. The runner takes
waiting commands in arrival order (a device's commands arrive in order), one at a time,
calls the handler and spools the outcome (EXECUTED with the result, FAILED with the
error, REJECTED, or EXPIRED when it is past its expiry before it runs) together with
marking it done. Reports are ordinary messages on the ``command-status`` endpoint: the
client's sender delivers them like telemetry, across restarts and outages.

The outcome also goes on the command stream, if one is open, as the handler returns:
ingest writes it at once, where the spooled report arrives only after the sender's
batching, ingest's reports topic and its relay. That copy is best effort (lost with the
stream); the spooled report is the durable one, so EXECUTED may be written twice.

At most once, unless the handler allows more: before a handler is called, the command is
marked started in the spool (a durable write), and its outcome is written together with
marking it done as soon as the handler returns. A clean stop lets the running handler
finish (``command_stop_grace_s``) and writes its outcome before it returns. A command found
started and not done when the runner starts (the process died, or a handler was cancelled
at a stop) is not run again: it ends FAILED with reason INTERRUPTED ("it may have run"),
unless its name is registered idempotent (``idempotent_commands``): then it runs again.

Done commands stay in the table for ``command_retention_s`` (a redelivered id within it is
recognised), then are deleted.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Awaitable, Callable, Collection

import grpc

from headwater.commands import model
from headwater.endpoints import COMMAND_STATUS, COMMAND_STATUS_CONTENT_TYPE, SERVICE_NAME
from headwater.errors import HeadwaterError
from headwater.gateway.channel import sleep_unless
from headwater.gateway.config import GatewayConfig
from headwater.gateway.records import NewMessage
from headwater.gateway.spool import Spool
from headwater.proto.commands.v1.command_pb2 import Command
from headwater.proto.commands.v1.command_status_pb2 import CommandState, CommandStatus
from headwater.proto.ingest.v1 import command_messages_pb2 as api

log = logging.getLogger(__name__)
#: Commands stored in one transaction at most.
_STORE_BATCH = 200
#: The reason of a command whose handler was interrupted (its outcome is unknown).
INTERRUPTED = "INTERRUPTED"

#: What a gateway provides: run one command, return its result (bytes, or None).
CommandHandler = Callable[[Command], Awaitable[bytes | None]]
#: Which commands may run again after an interruption: all (True), none (False), or the
#: names given.
IdempotentCommands = bool | Collection[str]


class RejectCommand(HeadwaterError):
    """Raise from a handler to refuse a command (unknown name, bad payload): REJECTED."""

    def __init__(self, reason: str, message: str = "") -> None:
        super().__init__(message or reason)
        self.reason = reason


class CommandReceiver:
    """Receives, stores, runs and reports commands (see the module docstring)."""

    def __init__(
        self,
        spool: Spool,
        channel: grpc.aio.Channel,
        config: GatewayConfig,
        handler: CommandHandler,
        wake_sender: Callable[[], None],
        max_unacked: int = 32,
        idempotent: IdempotentCommands = False,
    ) -> None:
        self._spool = spool
        self._channel = channel
        self._config = config
        self._handler = handler
        self._wake_sender = wake_sender
        self._max_unacked = max_unacked
        self._idempotent = idempotent
        self._metadata = (("authorization", f"Bearer {config.token}"),) if config.token else ()
        self._work = asyncio.Event()
        self._work.set()  # commands left waiting by the last run
        #: The open command stream's outgoing frames; None while there is none.
        self._frames: asyncio.Queue[api.ReceiveCommandsRequest | None] | None = None

    async def run(self, stop: asyncio.Event) -> None:
        """Receive and run until ``stop`` is set."""
        runner = asyncio.create_task(self._run_commands(stop))
        try:
            await self._receive_forever(stop)
        finally:
            # A clean stop: the running handler finishes and its outcome is written before
            # this returns. One still running after the grace (or any, when this is
            # cancelled rather than stopped) is cancelled: INTERRUPTED at the next start.
            self._work.set()
            grace = self._config.command_stop_grace_s if stop.is_set() else 0.0
            if not (await asyncio.wait({runner}, timeout=grace))[0]:
                log.warning(
                    "a command handler did not finish within the stop grace; cancelled",
                    extra={"grace_s": grace},
                )
                runner.cancel()
            await asyncio.gather(runner, return_exceptions=True)

    # --- receiving --------------------------------------------------------------------

    async def _receive_forever(self, stop: asyncio.Event) -> None:
        delay = self._config.backoff_initial_s
        while not stop.is_set():
            try:
                await self._receive_once(stop)
                delay = self._config.backoff_initial_s
            except grpc.aio.AioRpcError as exc:
                log.warning(
                    "command stream ended; reconnecting",
                    extra={"code": exc.code().name, "detail": exc.details(), "retry_in_s": delay},
                )
            except Exception as exc:  # the spool refused (full, disk error): nothing was acked
                log.error(
                    "cannot keep received commands in the spool; they were not acknowledged "
                    "and will come again",
                    extra={"error": f"{type(exc).__name__}: {exc}", "retry_in_s": delay},
                )
            await sleep_unless(stop, delay, self._channel)
            delay = min(delay * 2, self._config.backoff_max_s)

    async def _receive_once(self, stop: asyncio.Event) -> None:
        acks: asyncio.Queue[api.ReceiveCommandsRequest | None] = asyncio.Queue()
        acks.put_nowait(
            api.ReceiveCommandsRequest(open=api.OpenCommandStream(max_unacked=self._max_unacked))
        )

        async def requests():  # type: ignore[no-untyped-def]
            while (request := await acks.get()) is not None:
                yield request

        self._frames = acks
        call = self._channel.stream_stream(
            f"/{SERVICE_NAME}/ReceiveCommands",
            request_serializer=api.ReceiveCommandsRequest.SerializeToString,
            response_deserializer=api.ReceiveCommandsResponse.FromString,
        )(requests(), metadata=self._metadata)
        received: asyncio.Queue[Command | None] = asyncio.Queue()
        reader = asyncio.create_task(self._read(call, received))
        stopper = asyncio.create_task(stop.wait())
        stopper.add_done_callback(lambda _: call.cancel())
        try:
            while (first := await received.get()) is not None:
                # Store what has arrived meanwhile in one transaction (one disk flush): under
                # load, a transaction per command would be the gateway's limit.
                batch = [first]
                while len(batch) < _STORE_BATCH and not received.empty():
                    more = received.get_nowait()
                    if more is None:
                        received.put_nowait(None)
                        break
                    batch.append(more)
                await asyncio.to_thread(self.store_many, batch)
                for command in batch:
                    acks.put_nowait(
                        api.ReceiveCommandsRequest(
                            ack=api.CommandAck(
                                command_id=command.command_id, device_id=command.device_id
                            )
                        )
                    )
            await reader  # raises the stream's error, if it ended with one
        except asyncio.CancelledError:
            if not stop.is_set():
                raise
        finally:
            self._frames = None
            call.cancel()  # a refused store ends this stream too: unacked commands come again
            reader.cancel()
            stopper.cancel()
            acks.put_nowait(None)

    async def _read(self, call: object, received: asyncio.Queue[Command | None]) -> None:
        """Hand the stream's commands over; log refused frames; None at the end."""
        try:
            async for response in call:  # type: ignore[attr-defined]
                frame = response.WhichOneof("frame")
                if frame == "command":
                    received.put_nowait(response.command)
                    continue
                if frame not in ("ack_error", "outcome_error"):
                    continue  # a frame of a newer server: nothing to do with it
                err = getattr(response, frame)
                log.log(
                    # An outcome refused on the stream still goes as the spooled report.
                    logging.ERROR if frame == "ack_error" else logging.WARNING,
                    "ingest refused a command %s",
                    "acknowledgement" if frame == "ack_error" else "outcome on the stream",
                    extra={
                        "command_id": err.command_id,
                        "reason": err.reason,
                        "detail": err.message,
                    },
                )
        finally:
            received.put_nowait(None)

    def store(self, command: Command) -> bool:
        """Keep a command and spool its DELIVERED report; False for a repeat (kept once)."""
        return self.store_many([command]) == 1

    def store_many(self, commands: list[Command]) -> int:
        """Keep commands and spool DELIVERED for the new ones, in one transaction.

        Returns how many were new; a command id already kept for its device is a repeat
        (a redelivery) and is neither kept nor reported again.
        """

        def insert(db: sqlite3.Connection) -> list[NewMessage]:
            now = model.now_ms()
            reports = []
            for command in commands:
                cursor = db.execute(
                    "INSERT OR IGNORE INTO commands (device_id, command_id, envelope, "
                    "received_ms) VALUES (?, ?, ?, ?)",
                    (command.device_id, command.command_id, command.SerializeToString(), now),
                )
                if cursor.rowcount == 1:
                    delivered = model.status_of(command, CommandState.COMMAND_STATE_DELIVERED)
                    reports.append(_report(delivered))
            return reports

        enqueued = self._spool.enqueue_if(COMMAND_STATUS, insert, len(commands))
        new = len(enqueued.messages) if enqueued is not None else 0
        if new:
            self._wake_sender()
            self._work.set()
        return new

    # --- running ----------------------------------------------------------------------

    async def _run_commands(self, stop: asyncio.Event) -> None:
        await self._until_written(self._settle_interrupted, stop)
        while not stop.is_set():
            await self._work.wait()
            self._work.clear()
            while not stop.is_set() and (waiting := await asyncio.to_thread(self._waiting)):
                for seq, command in waiting:
                    if stop.is_set():
                        return
                    await self._run_one(seq, command, stop)

    async def _run_one(self, seq: int, command: Command, stop: asyncio.Event) -> None:
        """Mark started, run, write the outcome: the handler runs at most once per start."""
        if not model.expired(command):
            started = await self._until_written(
                lambda: self._spool.execute(
                    "UPDATE commands SET started_ms = ? WHERE seq = ?", (model.now_ms(), seq)
                ),
                stop,
            )
            if not started:  # stopping while the spool refuses: not run, still waiting
                return
        report = await self._outcome(command)
        await self._until_written(lambda: self._finish(seq, report), stop)

    def _settle_interrupted(self) -> None:
        """End the commands found started and not done: INTERRUPTED, or waiting if idempotent.

        Only the previous run leaves such rows (its process died, or its handler was
        cancelled at a stop): this runs before any handler is called.
        """
        rows = self._spool.read(
            "SELECT seq, envelope FROM commands WHERE done = 0 AND started_ms IS NOT NULL"
        )
        reports = []
        for seq, envelope in rows:
            command = Command.FromString(bytes(envelope))  # type: ignore[call-overload]
            again = self._may_run_again(command)
            log.warning(
                "a command was interrupted while its handler ran; %s",
                "running it again (idempotent)" if again else "reporting it FAILED INTERRUPTED",
                extra={"command_id": command.command_id, "device_id": command.device_id},
            )
            if again:
                self._spool.execute("UPDATE commands SET started_ms = NULL WHERE seq = ?", (seq,))
                continue
            status = model.status_of(
                command,
                CommandState.COMMAND_STATE_FAILED,
                reason=f"{INTERRUPTED}: the gateway stopped while the handler ran; the command "
                "may have run (it is not run again: its handler is not registered idempotent)",
            )
            reports.append((int(seq), _report(status)))  # type: ignore[call-overload]
        for seq, report in reports:
            self._finish(seq, report)

    def _may_run_again(self, command: Command) -> bool:
        if isinstance(self._idempotent, bool):
            return self._idempotent
        return command.name in self._idempotent

    def _waiting(self) -> list[tuple[int, Command]]:
        rows = self._spool.read(
            "SELECT seq, envelope FROM commands WHERE done = 0 ORDER BY seq LIMIT 200"
        )
        return [(int(seq), Command.FromString(bytes(env))) for seq, env in rows]  # type: ignore[call-overload,arg-type]

    async def _outcome(self, command: Command) -> NewMessage:
        """Run one command (unless expired); send its outcome on the stream; return its report."""
        result = b""
        reason = ""
        if model.expired(command):
            state = CommandState.COMMAND_STATE_EXPIRED
            reason = "EXPIRED_BEFORE_RUN"
        else:
            try:
                result = await self._handler(command) or b""
                state = CommandState.COMMAND_STATE_EXECUTED
            except RejectCommand as exc:
                state, reason = CommandState.COMMAND_STATE_REJECTED, f"{exc.reason}: {exc}"
            except Exception as exc:  # the handler's error is the command's outcome
                state, reason = CommandState.COMMAND_STATE_FAILED, f"{type(exc).__name__}: {exc}"
        log.info(
            "command finished",
            extra={
                "command_id": command.command_id,
                "device_id": command.device_id,
                "command": command.name,  # not "name": a LogRecord attribute (KeyError)
                "state": model.state_name(state),
                "reason": reason,
            },
        )
        status = model.status_of(command, state, reason=reason[:1024], result=result)
        self._send_outcome(status)
        return _report(status)

    def _send_outcome(self, status: CommandStatus) -> None:
        """Queue an outcome on the command stream, if one is open (best effort)."""
        if self._frames is not None:  # else the spooled report alone carries it
            frame = api.ReceiveCommandsRequest()
            frame.outcomes.statuses.append(status)
            self._frames.put_nowait(frame)

    async def _until_written(self, write: Callable[[], object], stop: asyncio.Event) -> bool:
        """Run a spool write, retrying while the spool refuses; False if stopped first.

        Handlers never run again for a retry: a refused outcome is retried as it is.
        """
        delay = self._config.backoff_initial_s
        while True:
            try:
                await asyncio.to_thread(write)
                return True
            except Exception as exc:  # the spool refused (full, disk error)
                log.error(
                    "cannot write command state to the spool; retrying",
                    extra={"error": f"{type(exc).__name__}: {exc}", "retry_in_s": delay},
                )
            await sleep_unless(stop, delay)
            if stop.is_set():
                return False
            delay = min(delay * 2, self._config.backoff_max_s)

    def _finish(self, seq: int, report: NewMessage) -> None:
        """Mark a command done and spool its report, in one transaction; drop old done ones."""
        now = model.now_ms()
        retention_ms = int(self._config.command_retention_s * 1000)

        def mark_done(db: sqlite3.Connection) -> list[NewMessage]:
            db.execute("UPDATE commands SET done = 1, finished_ms = ? WHERE seq = ?", (now, seq))
            db.execute(
                "DELETE FROM commands WHERE done = 1 AND finished_ms < ?", (now - retention_ms,)
            )
            return [report]

        self._spool.enqueue_if(COMMAND_STATUS, mark_done)
        self._wake_sender()


def _report(status: CommandStatus) -> NewMessage:
    """A command status report as a device message of the command's device."""
    return NewMessage(status.device_id, COMMAND_STATUS_CONTENT_TYPE, status.SerializeToString())
