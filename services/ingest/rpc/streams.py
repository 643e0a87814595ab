"""A stream: authenticate once, then answer each frame as the write path finishes it.

Frames are answered concurrently within a window, written in the order they were sent,
each under its own deadline (shorter than the gateway's frame timeout) and its own span;
a revoked gateway's stream ends before its next frame is written, and a draining replica
stops reading, answers what it read and ends the stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import grpc

from headwater import wire
from headwater.endpoints import SERVICE_NAME, Endpoint
from headwater.ingest.admission.auth import Gateway
from headwater.ingest.admission.ordering import Place, RefusalHold
from headwater.ingest.errors import IngestError, OverloadedError, UnauthenticatedError
from headwater.ingest.rpc.calls import Calls, time_left
from headwater.ingest.status import error_result
from headwater.ingest.status import to_rpc_status as rpc_status_of
from headwater.ingest.write.messages import message_id_of
from headwater.runtime.conventions import rpc_status_attributes


class Streams:
    """Serves the streams of every endpoint over the service's :class:`Calls`."""

    def __init__(self, calls: Calls) -> None:
        self._calls = calls

    async def serve(
        self,
        ep: Endpoint,
        frames: AsyncIterator[bytes],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[object]:
        """Serve one stream of ``ep``: its answers, one per frame."""
        calls = self._calls
        started = time.perf_counter()
        caller: Gateway | None = None
        with contextlib.ExitStack() as held:
            try:
                generation = calls.auth.generation()
                caller = calls.authenticate(context, context.invocation_metadata() or ())
                held.enter_context(calls.admission.stream_slot(caller))
            except IngestError as err:
                attrs = {"endpoint": ep.name, "method": "stream", "code": err.code.name}
                calls.call_done(ep.stream_method, attrs, started)
                calls.refused(ep, "stream", err, 0, caller)
                await context.abort_with_status(rpc_status_of(err))
                return
            async for answer in self._serve(ep, frames, (caller, generation), context, started):
                yield answer

    async def _serve(
        self,
        ep: Endpoint,
        frames: AsyncIterator[bytes],
        identity: tuple[Gateway, int],
        context: grpc.aio.ServicerContext,
        started: float,
    ) -> AsyncIterator[object]:
        """Answer an admitted stream's frames until it ends, is revoked or the replica drains."""
        calls = self._calls
        # A frame holds its window slot until its answer is handed to gRPC, so a gateway
        # that sends but does not read answers stops being read, instead of piling up
        # answers here.
        window = asyncio.Semaphore(calls.settings.stream_max_inflight_frames)
        answers: asyncio.Queue[object | None] = asyncio.Queue()
        reader = asyncio.create_task(
            self._read_frames(ep, frames, identity, answers, window, context)
        )
        stop_reading = asyncio.create_task(calls.draining.wait())
        stop_reading.add_done_callback(lambda _: reader.cancel())
        code = "OK"
        try:
            while (answer := await answers.get()) is not None:
                yield answer
                window.release()
            await reader
        except UnauthenticatedError as err:  # revoked or removed while the stream was open
            code = err.code.name
            calls.log_call_error(ep, err)
            await context.abort_with_status(rpc_status_of(err))
        finally:
            stop_reading.cancel()
            reader.cancel()
            attrs = {"endpoint": ep.name, "method": "stream", "code": code}
            calls.call_done(ep.stream_method, attrs, started)

    async def _read_frames(
        self,
        ep: Endpoint,
        frames: AsyncIterator[bytes],
        identity: tuple[Gateway, int],
        answers: asyncio.Queue[object | None],
        window: asyncio.Semaphore,
        context: grpc.aio.ServicerContext,
    ) -> None:
        """Answer frames concurrently, reading a new one only while the window has room.

        Not reading is the flow control: HTTP/2 window updates stop, so a fast gateway
        is slowed down instead of filling this process's memory. ``identity`` is the
        caller and the tokens-table generation it was resolved in; each frame re-checks
        it (:meth:`Calls.current_gateway`), so a revocation ends the stream with
        UnauthenticatedError (raised from here) before the next frame is written. Each
        frame takes its place in the gateway's issue order as it is read, so frames
        answered concurrently still write their records in the order they were sent.
        """
        calls = self._calls
        running: set[asyncio.Task[None]] = set()
        hold = RefusalHold()

        async def answer(frame: bytes, gateway: Gateway, place: Place) -> None:
            try:
                result = await self._answer(ep, frame, gateway, context, place, hold)
            except BaseException:
                window.release()
                raise
            answers.put_nowait(result)  # the window slot is released once it is sent

        try:
            async for frame in frames:
                await window.acquire()
                identity = calls.current_gateway(identity, context)
                place = calls.order.join(identity[0].gateway_id)
                task = asyncio.create_task(answer(frame, identity[0], place))
                running.add(task)
                task.add_done_callback(running.discard)
        except asyncio.CancelledError:
            pass  # draining: stop reading, answer what was read, then end the stream
        finally:
            if running:
                await asyncio.gather(*running, return_exceptions=True)
            answers.put_nowait(None)

    async def _answer(
        self,
        ep: Endpoint,
        data: bytes,
        gateway: Gateway,
        context: grpc.aio.ServicerContext,
        place: Place,
        hold: RefusalHold,
    ) -> object:
        """Write one frame and return its answer (every refusal as per-message results)."""
        calls = self._calls
        started = time.perf_counter()
        code = grpc.StatusCode.OK
        # Each frame gets its own deadline, shorter than the gateway's frame timeout, so the
        # answer (an error included) arrives before the gateway gives up and resends.
        left = calls.settings.stream_frame_timeout_seconds
        stream_left = context.time_remaining()
        if stream_left is not None:
            left = min(left, stream_left)
        # One server span per frame (the unit of work and of answer), not per stream.
        with calls.server_span(
            f"{SERVICE_NAME}/{ep.stream_method} frame", ep.stream_method
        ) as span:
            try:
                calls.check_ready()
                hold.check()
                frame_left = time_left(left)
                calls.admission.check_deadline(frame_left)
                frame, results = await calls.frames.write(
                    ep, data, wire.stream_deserializer, gateway, frame_left, place
                )
            except IngestError as err:
                place.leave()
                code = err.code
                frame = wire.stream_deserializer(data)  # the frame id and message count
                if isinstance(err, OverloadedError):
                    hold.refused(err)
                    # Refused unparsed: results by position (an empty id), one per message.
                    calls.refused(ep, "stream", err, len(data), gateway)
                    results = [error_result("", err) for _ in frame.messages or [b""]]
                else:
                    calls.log_call_error(ep, err)
                    results = [error_result("", err)] if frame.error else []
                    results += [error_result(message_id_of(raw), err) for raw in frame.messages]
            span.set_attributes(rpc_status_attributes(code.name))
        attrs = {"endpoint": ep.name, "code": code.name}
        calls.metrics.frame_duration.record(time.perf_counter() - started, attrs)
        return ep.stream_response(frame_id=frame.frame_id, results=results)
