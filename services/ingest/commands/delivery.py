"""ReceiveCommands: deliver a gateway's commands on its stream, take its acknowledgements.

Whose commands: the calling gateway's tenant, devices its tokens-file patterns match
(the same binding that decides which devices it may publish for). Order: a device's
commands go out in log order on one stream; a stream that ends with commands unacked
leaves them in the book, and the next stream (on any replica) sends them again, first.
So: per-device order, at least once; the gateway stores a command id once.

Outcomes: the gateway also says on the stream how each command ended (EXECUTED, FAILED,
REJECTED, EXPIRED), as its handler returns. Checked like an acknowledgement (its device
bound to the gateway, a command the book knows), it is written to command-status.v1 by
this replica with the tenant and gateway authenticated here. Its durable copy, the
gateway's spooled report, still comes through the relay: the stream copy only makes the
state visible a produce after the handler returns instead of after the report's trip.

One owner per device, for the whole service: when several gateways are bound to a device,
only its owner is sent its new commands, and only by the replica holding the device's
lease (owners.py, leases.py: the first to claim it keeps it while its stream is open;
another takes over after a grace period without). A command once sent to a gateway is
reserved to that gateway, in the lease, before it is sent: it may be in its spool with the
acknowledgement lost, so another gateway running it could run it twice. Any replica
sends reserved commands to their gateway's streams (it acknowledges them from its spool)
until they are acknowledged or expire.

Flow control: at most ``max_unacked`` commands are out on a stream; the next one waits
for an acknowledgement. Limits per gateway: ``max_streams_per_gateway`` open command
streams, and a command stream holds one of the replica's stream slots like a publishing
stream does (HEADWATER_INGEST_MAX_STREAMS, the gateway's max_streams).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

import grpc
from google.protobuf.message import DecodeError

from headwater.commands import model
from headwater.endpoints import SERVICE_NAME
from headwater.ingest.admission.auth import Authenticator, Gateway
from headwater.ingest.errors import (
    IngestError,
    InvalidMessageError,
    OverloadedError,
)
from headwater.ingest.settings import CONTRACT_MAX_PAYLOAD_BYTES
from headwater.ingest.status import to_rpc_status
from headwater.proto.commands.v1.command_pb2 import Command
from headwater.proto.commands.v1.command_status_pb2 import CommandState, CommandStatus
from headwater.proto.ingest.v1 import command_messages_pb2 as api

from .book import CommandBook, CommandKey, DeviceKey, Entry
from .owners import OwnerBook
from .settings import CommandSettings

#: The variable that sets a limit, named in refusals so an operator knows what to change.
_var = CommandSettings.variable

log = logging.getLogger(__name__)
METHOD = "ReceiveCommands"


@dataclass(eq=False)
class CommandStream:
    """One open ReceiveCommands stream."""

    gateway: Gateway
    window: asyncio.Semaphore
    #: The window's size: how many new commands one lease extension covers.
    max_unacked: int
    #: Devices to look at for commands to send.
    dirty: set[DeviceKey] = field(default_factory=set)
    #: Sent and not yet acknowledged, with the time sent.
    unacked: dict[CommandKey, float] = field(default_factory=dict)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    #: Whether this stream's gateway is bound to a device (fnmatch is not free).
    bound: dict[str, bool] = field(default_factory=dict)

    def serves(self, device: DeviceKey) -> bool:
        """True if the device is this stream's gateway's."""
        tenant, device_id = device
        if tenant != self.gateway.tenant:
            return False
        if device_id not in self.bound:
            self.bound[device_id] = self.gateway.may_speak_for(device_id)
        return self.bound[device_id]


class CommandDelivery:
    """Serves ReceiveCommands from one book (see the module docstring)."""

    def __init__(
        self,
        settings: CommandSettings,
        book: CommandBook,
        owners: OwnerBook,
        authenticator: Authenticator,
        caught_up: asyncio.Event,
        on_delivered: Callable[[Entry, str], None],
        on_outcome: Callable[[CommandStatus, str], None],
        stream_slot: Callable[[Gateway], AbstractContextManager[None]] | None = None,
    ) -> None:
        self._settings = settings
        #: The replica's stream slots (HEADWATER_INGEST_MAX_STREAMS and the gateway's
        #: max_streams), shared with the publishing streams; None: not counted (tests).
        self._stream_slot = stream_slot or (lambda _gateway: contextlib.nullcontext())
        self._book = book
        self._owners = owners
        self._auth = authenticator
        self._caught_up = caught_up
        self._on_delivered = on_delivered
        #: Called with (the outcome, "") to write it, or (the outcome, why it was refused).
        self._on_outcome = on_outcome
        self._streams: dict[str, set[CommandStream]] = {}
        book.on_added = self._added
        owners.on_wake = self._added

    @property
    def open_streams(self) -> int:
        """Streams open now."""
        return sum(len(s) for s in self._streams.values())

    def rpc_handler(self) -> grpc.GenericRpcHandler:
        """The handler of ReceiveCommands, to add next to the servicer's."""
        # Frames arrive as bytes and are decoded in the handler: a deserializer that raises
        # does so outside it, and the caller gets UNKNOWN (and the log a traceback).
        method = grpc.stream_stream_rpc_method_handler(
            self._receive,
            request_deserializer=None,
            response_serializer=api.ReceiveCommandsResponse.SerializeToString,
        )
        return grpc.method_handlers_generic_handler(SERVICE_NAME, {METHOD: method})

    def _added(self, device: DeviceKey) -> None:
        """A command for ``device`` arrived, or its lease changed: wake the streams serving it."""
        for stream in self._streams.get(device[0], ()):
            if stream.serves(device):
                stream.dirty.add(device)
                stream.wake.set()

    async def _receive(
        self, frames: AsyncIterator[bytes], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[api.ReceiveCommandsResponse]:
        requests = _decoded(frames)
        held = contextlib.ExitStack()
        try:
            gateway = self._auth.authenticate(
                context.invocation_metadata() or (), context.auth_context()
            )
            open_frame = await anext(aiter(requests), None)
            if open_frame is None or open_frame.WhichOneof("frame") != "open":
                raise InvalidMessageError(
                    "the first frame of ReceiveCommands must be 'open'", reason="MALFORMED_REQUEST"
                )
            mine = self._streams.setdefault(gateway.tenant, set())
            same_gateway = sum(1 for s in mine if s.gateway.gateway_id == gateway.gateway_id)
            if same_gateway >= self._settings.max_streams_per_gateway:
                raise OverloadedError(
                    f"gateway {gateway.gateway_id!r} has {same_gateway} command streams open; "
                    f"at most {self._settings.max_streams_per_gateway}. Open one per gateway",
                    retry_delay_s=5.0,
                    limit="command_streams_per_gateway",
                    setting=_var("max_streams_per_gateway"),
                    limit_value=self._settings.max_streams_per_gateway,
                    subject=f"gateway:{gateway.gateway_id}",
                )
            # Counted with the publishing streams: a stream is a stream to the replica.
            held.enter_context(self._stream_slot(gateway))
        except IngestError as err:
            held.close()
            log.info(err.message, extra={"method": METHOD, "code": err.code.name})
            await context.abort_with_status(to_rpc_status(err))
            return
        want = min(
            open_frame.open.max_unacked or self._settings.max_unacked, self._settings.max_unacked
        )
        stream = CommandStream(gateway, asyncio.Semaphore(want), want)
        mine.add(stream)
        self._owners.connected(gateway.gateway_id)
        answers: asyncio.Queue[api.ReceiveCommandsResponse] = asyncio.Queue()
        acks = asyncio.create_task(self._read_acks(stream, requests, answers))
        log.info(
            "command stream opened",
            extra={"gateway": gateway.gateway_id, "tenant": gateway.tenant},
        )
        generation = self._auth.generation()
        try:
            await self._caught_up.wait()
            stream.dirty.update(d for d in self._book.devices(gateway.tenant) if stream.serves(d))
            while not acks.done():
                generation = self._recheck(stream, generation, context)
                stream.wake.clear()
                while not answers.empty():
                    yield answers.get_nowait()
                async for command in self._due(stream):
                    yield api.ReceiveCommandsResponse(command=command)
                    while not answers.empty():
                        yield answers.get_nowait()
                if not stream.dirty and answers.empty():
                    await _first(stream.wake.wait(), acks)
            if not acks.cancelled() and isinstance(acks.exception(), IngestError):
                raise acks.exception()  # type: ignore[misc]  # an undecodable frame
        except IngestError as err:  # revoked or removed meanwhile; an undecodable frame
            log.info(err.message, extra={"method": METHOD, "gateway": gateway.gateway_id})
            await context.abort_with_status(to_rpc_status(err))
        finally:
            acks.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await acks
            mine.discard(stream)
            held.close()
            self._owners.disconnected(gateway.gateway_id)
            log.info(
                "command stream closed",
                extra={"gateway": gateway.gateway_id, "unacked": len(stream.unacked)},
            )

    def _recheck(
        self, stream: CommandStream, generation: int, context: grpc.aio.ServicerContext
    ) -> int:
        """Authenticate again when the tokens file changed; raise UnauthenticatedError.

        A revoked gateway loses its stream at the next wake-up (at most a second later);
        a changed binding applies to the commands sent from then on.
        """
        now = self._auth.generation()
        if now == generation:
            return now
        gateway = self._auth.authenticate(
            context.invocation_metadata() or (), context.auth_context()
        )
        if gateway != stream.gateway:
            stream.gateway = gateway
            stream.bound.clear()
            stream.dirty.update(d for d in self._book.devices(gateway.tenant) if stream.serves(d))
        return now

    async def _due(self, stream: CommandStream) -> AsyncIterator[Command]:
        """The commands of the stream's dirty devices not sent on it yet, device by device."""
        while stream.dirty:
            device = stream.dirty.pop()
            gateway_id = stream.gateway.gateway_id
            waiting = self._book.waiting(device)
            for index, entry in enumerate(waiting):
                if entry.key in stream.unacked:
                    continue
                reserved = self._owners.gateway_of(device, entry.offset)
                if reserved is None:
                    # A new command: only from the replica holding the device's lease for
                    # this gateway, reserved before it is sent, as many at a time as the
                    # window has room for (reserved and not sent only if the stream ends
                    # meanwhile). Not the owner: woken again when the lease changes or lapses.
                    room = max(1, stream.max_unacked - len(stream.unacked))
                    through = waiting[min(index + room, len(waiting)) - 1].offset
                    if not await self._owners.cover(device, gateway_id, through):
                        break
                elif reserved != gateway_id:
                    continue  # may be in another gateway's spool
                if model.expired(entry.command):
                    continue  # the expiry check marks it EXPIRED; never delivered
                await stream.window.acquire()
                if self._book.get(entry.key) is None:  # delivered elsewhere meanwhile
                    stream.window.release()
                    continue
                if reserved is None and not self._owners.valid(device, gateway_id, entry.offset):
                    stream.window.release()  # the lease lapsed or was lost while waiting
                    stream.dirty.add(device)
                    break
                stream.unacked[entry.key] = time.monotonic()
                entry.sent_to = gateway_id
                yield entry.command

    async def _read_acks(
        self,
        stream: CommandStream,
        requests: AsyncIterator[api.ReceiveCommandsRequest],
        answers: asyncio.Queue[api.ReceiveCommandsResponse],
    ) -> None:
        async for request in requests:
            frame = request.WhichOneof("frame")
            errors: list[api.ReceiveCommandsResponse] = []
            if frame == "ack":
                if error := self._ack(stream, request.ack):
                    errors.append(api.ReceiveCommandsResponse(ack_error=error))
            elif frame == "outcomes":
                for status in request.outcomes.statuses:
                    if error := self._outcome(stream, status):
                        errors.append(api.ReceiveCommandsResponse(outcome_error=error))
            # (a second "open" changes nothing)
            if errors:
                for answer in errors:
                    answers.put_nowait(answer)
                stream.wake.set()

    def _ack(self, stream: CommandStream, ack: api.CommandAck) -> api.CommandAckError | None:
        gateway = stream.gateway
        key = (gateway.tenant, ack.device_id, ack.command_id)
        if stream.unacked.pop(key, None) is not None:
            stream.window.release()
        elif error := self._not_its(gateway, key, "ack"):
            return error
        entry = self._book.finish(key, CommandState.COMMAND_STATE_DELIVERED)
        if entry is not None:
            self._on_delivered(entry, gateway.gateway_id)
        return None

    def _outcome(self, stream: CommandStream, status: CommandStatus) -> api.CommandAckError | None:
        """Check an outcome sent on the stream and hand it over to be written."""
        gateway = stream.gateway
        key = (gateway.tenant, status.device_id, status.command_id)
        error = self._not_its(gateway, key, "outcome")
        if error is None and status.state not in model.FINAL_STATES:
            error = api.CommandAckError(
                command_id=status.command_id,
                reason="NOT_AN_OUTCOME",
                message=f"state {model.state_name(status.state)} does not end a command "
                "(EXECUTED, FAILED, REJECTED or EXPIRED do); nothing was written",
            )
        if error is None and status.ByteSize() > CONTRACT_MAX_PAYLOAD_BYTES:
            # As large as a report on the command-status endpoint may be, and no larger.
            error = api.CommandAckError(
                command_id=status.command_id,
                reason="OUTCOME_TOO_LARGE",
                message=f"the outcome has {status.ByteSize()} bytes, over "
                f"{CONTRACT_MAX_PAYLOAD_BYTES}: return a reference to large results; "
                "nothing was written",
            )
        if error is not None:
            self._on_outcome(status, error.reason)
            return error
        # Who reported it is who authenticated, never what the frame says (as the relay).
        status.tenant, status.gateway_id = gateway.tenant, gateway.gateway_id
        # Finished: not delivered again, even if the outcome overtook its own ack.
        self._book.apply(status)
        self._on_outcome(status, "")
        return None

    def _not_its(self, gateway: Gateway, key: CommandKey, frame: str) -> api.CommandAckError | None:
        """Refuse a frame (an ack, an outcome) about a command not the gateway's, or unknown."""
        _, device_id, command_id = key
        what = "acknowledged" if frame == "ack" else "written"
        if not gateway.may_speak_for(device_id):
            log.warning(
                "a gateway sent an %s for a command of a device not bound to it",
                frame,
                extra={"gateway": gateway.gateway_id, "device_id": device_id},
            )
            return api.CommandAckError(
                command_id=command_id,
                reason="COMMAND_NOT_YOURS",
                message=f"device {device_id!r} is not bound to gateway "
                f"{gateway.gateway_id!r} (tenant {gateway.tenant!r}); nothing was {what}",
            )
        if not self._book.known(key):
            return api.CommandAckError(
                command_id=command_id,
                reason="UNKNOWN_COMMAND",
                message=f"no command {command_id!r} for device {device_id!r} of "
                f"tenant {gateway.tenant!r}; nothing was {what}",
            )
        return None


async def _decoded(frames: AsyncIterator[bytes]) -> AsyncIterator[api.ReceiveCommandsRequest]:
    """The stream's frames decoded; InvalidMessageError (INVALID_ARGUMENT) for one that is not."""
    async for frame in frames:
        try:
            yield api.ReceiveCommandsRequest.FromString(frame)
        except DecodeError as exc:
            raise InvalidMessageError(
                f"a ReceiveCommands frame is not a ReceiveCommandsRequest ({exc})",
                reason="MALFORMED_REQUEST",
            ) from None


#: Longest sleep of an idle stream: how soon it notices a revoked token.
_IDLE_CHECK_S = 1.0


async def _first(wait: Awaitable[object], acks: asyncio.Task[None]) -> None:
    """Wait for ``wait`` or for the ack reader to end, a second at most."""
    waiter = asyncio.ensure_future(wait)
    try:
        await asyncio.wait(
            {waiter, acks}, timeout=_IDLE_CHECK_S, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        waiter.cancel()
