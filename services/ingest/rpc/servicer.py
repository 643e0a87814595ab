"""The IngestService RPCs: authenticate, admit, hand each request to the write path, answer.

Handlers are registered by hand (not through the generated base class) so that each
request arrives as raw message slices (``wire.py``): the bytes written to Kafka are the
bytes the gateway sent. Writing a request (admit, produce, results, release) is
``write/frames.py``; the order of a gateway's requests is ``admission/ordering.py``.
The deadline is checked here, once per request: a publish call's before its body is read,
a stream frame's before it is written.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterator

import grpc
from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import SpanKind, Tracer

from headwater import wire
from headwater.endpoints import ENDPOINTS, SERVICE_NAME, Endpoint
from headwater.ingest.admission.auth import Authenticator, Gateway
from headwater.ingest.admission.limits import Admission
from headwater.ingest.admission.ordering import IssueOrder, Place, RefusalHold
from headwater.ingest.errors import (
    BrokerUnavailableError,
    IngestError,
    InvalidMessageError,
    OverloadedError,
    ShuttingDownError,
    UnauthenticatedError,
)
from headwater.ingest.metrics import IngestMetrics
from headwater.ingest.settings import IngestSettings
from headwater.ingest.status import BROKER_RETRY_DELAY_S, error_result
from headwater.ingest.status import to_rpc_status as rpc_status_of
from headwater.ingest.write.frames import FrameWriter
from headwater.ingest.write.messages import message_id_of
from headwater.ingest.writers.protocol import RecordWriter
from headwater.runtime.conventions import rpc_attributes, rpc_status_attributes

log = logging.getLogger(__name__)

#: Time kept back from the caller's deadline to send the answer before it expires.
_ANSWER_MARGIN_S = 0.05


class IngestServicer:
    """Serves the IngestService endpoints over one RecordWriter."""

    def __init__(
        self,
        settings: IngestSettings,
        writer: RecordWriter,
        authenticator: Authenticator,
        tracer: Tracer,
        metrics: IngestMetrics,
    ) -> None:
        self._settings = settings
        self._writer = writer
        self._auth = authenticator
        self._tracer = tracer
        self._metrics = metrics
        self._admission = Admission(settings)
        self._frames = FrameWriter(settings, writer, self._admission, tracer, metrics)
        #: Each gateway's requests in arrival order: their records are issued in it.
        self._order = IssueOrder()
        metrics.observe_inflight(lambda: (self._admission.in_use, self._frames.inflight_requests))
        metrics.observe_admission(
            lambda: self._admission.streams, self._admission.quotas.inflight_by_gateway
        )
        self._draining = asyncio.Event()
        #: Each endpoint's span attributes, built once (the SDK copies them per span).
        self._span_attrs = {
            name: rpc_attributes(SERVICE_NAME, name)
            for ep in ENDPOINTS
            for name in (ep.publish_method, ep.stream_method)
        }

    def stream_slot(self, gateway: Gateway) -> contextlib.AbstractContextManager[None]:
        """Hold one of this replica's stream slots for ``gateway`` (other streaming RPCs)."""
        return self._admission.stream_slot(gateway)

    def begin_drain(self) -> None:
        """Refuse new work and end open streams once their frames are answered."""
        self._draining.set()

    def rpc_handler(self) -> grpc.GenericRpcHandler:
        """Return the generic handler that serves every endpoint.

        Requests arrive as raw bytes (no deserializer): their size is all admission needs,
        so a refused call is never parsed. Publish is served as request-streaming (the
        wire is the same for a unary caller): the handler starts before gRPC reads the
        request, so admission can refuse a call whose body it never copies.
        """
        methods: dict[str, grpc.RpcMethodHandler] = {}
        for ep in ENDPOINTS:
            methods[ep.publish_method] = grpc.stream_unary_rpc_method_handler(
                functools.partial(self.publish, ep),
                request_deserializer=None,
                response_serializer=ep.publish_response.SerializeToString,
            )
            methods[ep.stream_method] = grpc.stream_stream_rpc_method_handler(
                functools.partial(self._stream, ep),
                request_deserializer=None,
                response_serializer=ep.stream_response.SerializeToString,
            )
        return grpc.method_handlers_generic_handler(SERVICE_NAME, methods)

    # --- RPCs -------------------------------------------------------------------------

    async def publish(
        self,
        ep: Endpoint,
        _requests: AsyncIterator[bytes] | None,
        context: grpc.aio.ServicerContext,
    ) -> object:
        """Serve one publish call of ``ep``: the handler gRPC calls, and a benchmark's entry.

        The request is read from ``context`` (``context.read()``), never from ``_requests``
        (gRPC's request iterator, unused: see :meth:`_read_request`), so a benchmark may call
        it with None and a context of its own that hands over a request.
        """
        started = time.perf_counter()
        attrs = {"endpoint": ep.name, "method": "publish", "code": "OK"}
        gateway: Gateway | None = None
        metadata = context.invocation_metadata() or ()
        try:
            gateway = self._authenticate(context, metadata)
            with self._admission.rpc_slot(gateway):
                return await self._serve_publish(ep, gateway, metadata, context, attrs)
        except IngestError as err:  # refused before its body was read: no span
            await self._refuse(ep, err, attrs, 0, gateway, context)
        finally:
            self._call_done(ep, ep.publish_method, attrs, started)
        raise AssertionError("unreachable: abort_with_status raises")

    async def _serve_publish(
        self,
        ep: Endpoint,
        gateway: Gateway,
        metadata: tuple[tuple[str, str | bytes], ...],
        context: grpc.aio.ServicerContext,
        attrs: dict[str, str],
    ) -> object:
        """Serve a publish call holding its slot: check, read the body, write it.

        Refusals come first, without a span and before the body is read (raised as
        IngestError): under overload they are most calls, and each must cost as little as
        possible. A failed write is answered here, under the call's span.
        """
        self._check_ready()
        time_left = _time_left(context.time_remaining())
        self._admission.check_deadline(time_left)
        self._admission.check_room(gateway)
        async with self._admission.reading_body(gateway, time_left):
            request = await self._read_request(context)
        # The place is the arrival order of this gateway's requests (no await between the
        # body's arrival and here).
        place = self._order.join(gateway.gateway_id)
        with self._tracer.start_as_current_span(
            f"{SERVICE_NAME}/{ep.publish_method}",
            context=_trace_parent(metadata),
            kind=SpanKind.SERVER,
            attributes=self._span_attrs[ep.publish_method],
        ) as span:
            try:
                _, results = await self._frames.write(
                    ep,
                    request,
                    wire.publish_deserializer,
                    gateway,
                    _time_left(context.time_remaining()),
                    place,
                )
                span.set_attributes(_OK_STATUS_ATTRIBUTES)
                return ep.publish_response(results=results)
            except IngestError as err:
                span.set_attributes(rpc_status_attributes(err.code.name))
                span.set_status(trace.Status(trace.StatusCode.ERROR, err.reason))
                await self._refuse(ep, err, attrs, len(request), gateway, context)
        raise AssertionError("unreachable: abort_with_status raises")

    async def _refuse(
        self,
        ep: Endpoint,
        err: IngestError,
        attrs: dict[str, str],
        nbytes: int,
        gateway: Gateway | None,
        context: grpc.aio.ServicerContext,
    ) -> None:
        """End a publish call with ``err``'s status (raises, as abort_with_status does)."""
        attrs["code"] = err.code.name
        self._refused(ep, "publish", err, nbytes, gateway)
        await context.abort_with_status(rpc_status_of(err))

    def _call_done(self, ep: Endpoint, method: str, attrs: dict[str, str], started: float) -> None:
        self._metrics.requests.add(1, attrs)
        self._metrics.rpc_call(SERVICE_NAME, method, attrs["code"], time.perf_counter() - started)

    async def _read_request(self, context: grpc.aio.ServicerContext) -> bytes:
        """Read a publish call's one request.

        With ``context.read()``, not ``async for`` over the request iterator: leaving that
        loop after the first request leaves gRPC's async generator open, and closing it
        costs the event loop one more task per call (asyncio's finalizer hook).
        """
        request = await context.read()
        if request is not grpc.aio.EOF:
            return request
        raise InvalidMessageError(
            "a publish call carries exactly one request; none arrived",
            reason="MALFORMED_REQUEST",
        )

    async def _stream(
        self,
        ep: Endpoint,
        frames: AsyncIterator[bytes],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[object]:
        started = time.perf_counter()
        caller: Gateway | None = None
        with contextlib.ExitStack() as held:
            try:
                generation = self._auth.generation()
                caller = self._authenticate(context, context.invocation_metadata() or ())
                held.enter_context(self._admission.stream_slot(caller))
            except IngestError as err:
                self._metrics.requests.add(
                    1, {"endpoint": ep.name, "method": "stream", "code": err.code.name}
                )
                self._metrics.rpc_call(
                    SERVICE_NAME, ep.stream_method, err.code.name, time.perf_counter() - started
                )
                self._refused(ep, "stream", err, 0, caller)
                await context.abort_with_status(rpc_status_of(err))
                return
            async for answer in self._serve_stream(
                ep, frames, (caller, generation), context, started
            ):
                yield answer

    async def _serve_stream(
        self,
        ep: Endpoint,
        frames: AsyncIterator[bytes],
        identity: tuple[Gateway, int],
        context: grpc.aio.ServicerContext,
        started: float,
    ) -> AsyncIterator[object]:
        """Answer an admitted stream's frames until it ends, is revoked or the replica drains."""
        # A frame holds its window slot until its answer is handed to gRPC, so a gateway
        # that sends but does not read answers stops being read, instead of piling up
        # answers here.
        window = asyncio.Semaphore(self._settings.stream_max_inflight_frames)
        answers: asyncio.Queue[object | None] = asyncio.Queue()
        reader = asyncio.create_task(
            self._read_frames(ep, frames, identity, answers, window, context)
        )
        stop_reading = asyncio.create_task(self._draining.wait())
        stop_reading.add_done_callback(lambda _: reader.cancel())
        code = "OK"
        try:
            while (answer := await answers.get()) is not None:
                yield answer
                window.release()
            await reader
        except UnauthenticatedError as err:  # revoked or removed while the stream was open
            code = err.code.name
            self._log_call_error(ep, err)
            await context.abort_with_status(rpc_status_of(err))
        finally:
            stop_reading.cancel()
            reader.cancel()
            self._metrics.requests.add(1, {"endpoint": ep.name, "method": "stream", "code": code})
            self._metrics.rpc_call(
                SERVICE_NAME, ep.stream_method, code, time.perf_counter() - started
            )

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
        it (:meth:`_current_gateway`), so a revocation ends the stream with
        UnauthenticatedError (raised from here) before the next frame is written. Each
        frame takes its place in the gateway's issue order as it is read, so frames
        answered concurrently still write their records in the order they were sent.
        """
        running: set[asyncio.Task[None]] = set()
        hold = RefusalHold()

        async def answer(frame: bytes, gateway: Gateway, place: Place) -> None:
            try:
                result = await self._stream_answer(ep, frame, gateway, context, place, hold)
            except BaseException:
                window.release()
                raise
            answers.put_nowait(result)  # the window slot is released once it is sent

        try:
            async for frame in frames:
                await window.acquire()
                identity = self._current_gateway(identity, context)
                place = self._order.join(identity[0].gateway_id)
                task = asyncio.create_task(answer(frame, identity[0], place))
                running.add(task)
                task.add_done_callback(running.discard)
        except asyncio.CancelledError:
            pass  # draining: stop reading, answer what was read, then end the stream
        finally:
            if running:
                await asyncio.gather(*running, return_exceptions=True)
            answers.put_nowait(None)

    async def _stream_answer(
        self,
        ep: Endpoint,
        data: bytes,
        gateway: Gateway,
        context: grpc.aio.ServicerContext,
        place: Place,
        hold: RefusalHold,
    ) -> object:
        started = time.perf_counter()
        code = grpc.StatusCode.OK
        # Each frame gets its own deadline, shorter than the gateway's frame timeout, so the
        # answer (an error included) arrives before the gateway gives up and resends.
        time_left = self._settings.stream_frame_timeout_seconds
        stream_left = context.time_remaining()
        if stream_left is not None:
            time_left = min(time_left, stream_left)
        # One server span per frame (the unit of work and of answer), not per stream.
        with self._tracer.start_as_current_span(
            f"{SERVICE_NAME}/{ep.stream_method} frame",
            kind=SpanKind.SERVER,
            attributes=self._span_attrs[ep.stream_method],
        ) as span:
            try:
                self._check_ready()
                hold.check()
                frame_left = _time_left(time_left)
                self._admission.check_deadline(frame_left)
                frame, results = await self._frames.write(
                    ep, data, wire.stream_deserializer, gateway, frame_left, place
                )
            except IngestError as err:
                place.leave()
                code = err.code
                frame = wire.stream_deserializer(data)  # the frame id and message count
                if isinstance(err, OverloadedError):
                    hold.refused(err)
                    # Refused unparsed: results by position (an empty id), one per message.
                    self._refused(ep, "stream", err, len(data), gateway)
                    results = [error_result("", err) for _ in frame.messages or [b""]]
                else:
                    self._log_call_error(ep, err)
                    results = [error_result("", err)] if frame.error else []
                    results += [error_result(message_id_of(raw), err) for raw in frame.messages]
            span.set_attributes(rpc_status_attributes(code.name))
        attrs = {"endpoint": ep.name, "code": code.name}
        self._metrics.frame_duration.record(time.perf_counter() - started, attrs)
        return ep.stream_response(frame_id=frame.frame_id, results=results)

    # --- helpers ----------------------------------------------------------------------

    def _authenticate(
        self, context: grpc.aio.ServicerContext, metadata: tuple[tuple[str, str | bytes], ...]
    ) -> Gateway:
        # The peer's certificate names are read only where they are used (mTLS): gRPC
        # builds a new dict of the call's auth context on every auth_context() call.
        auth_context = (context.auth_context() or {}) if self._auth.mtls else {}
        return self._auth.authenticate(metadata, auth_context)

    def _current_gateway(
        self, identity: tuple[Gateway, int], context: grpc.aio.ServicerContext
    ) -> tuple[Gateway, int]:
        """Return the stream's caller as the tokens table now says, with its generation.

        Only a new table (a reloaded file) costs an authentication; it raises
        UnauthenticatedError when the credentials are now revoked or unknown, and a new
        device binding applies to the frame's messages (PERMISSION_DENIED per message).
        """
        generation = self._auth.generation()
        if generation == identity[1]:
            return identity
        return self._authenticate(context, context.invocation_metadata() or ()), generation

    def _check_ready(self) -> None:
        if self._draining.is_set():
            raise ShuttingDownError(
                "this ingest replica is shutting down; retry (another replica will answer)",
                retry_delay_s=0.1,
            )
        if not self._writer.connected:
            raise BrokerUnavailableError(
                "not connected to Kafka yet; retry later", retry_delay_s=BROKER_RETRY_DELAY_S
            )

    def _refused(
        self,
        ep: Endpoint,
        method: str,
        err: IngestError,
        nbytes: int,
        gateway: Gateway | None,
    ) -> None:
        """Count a refusal by gateway and limit (overload), or log the call's error."""
        if not isinstance(err, OverloadedError):
            self._log_call_error(ep, err)
            return
        attrs = {
            "endpoint": ep.name,
            "method": method,
            "gateway": gateway.gateway_id if gateway else "",
            "limit": err.limit,
        }
        self._metrics.refused_calls.add(1, attrs)
        self._metrics.refused_bytes.add(nbytes, attrs)
        # Not a log line per refusal: under overload that would be most calls. The
        # metrics carry the counts; debug level shows each one when asked for.
        log.debug(
            err.message,
            extra={"endpoint": ep.name, "code": err.code.name, "limit": err.limit, **attrs},
        )

    def _log_call_error(self, ep: Endpoint, err: IngestError) -> None:
        level = logging.WARNING if err.infrastructure else logging.INFO
        log.log(
            level,
            err.message,
            extra={"endpoint": ep.name, "code": err.code.name, "reason": err.reason},
        )


#: Metadata keys of the trace-context propagators (W3C trace context and baggage).
_TRACE_KEYS = frozenset(("traceparent", "tracestate", "baggage"))
_OK_STATUS_ATTRIBUTES = rpc_status_attributes("OK")


#: The parent of a call that sent no trace context: none (the span starts a new trace).
_NO_PARENT = Context()


def _trace_parent(metadata: tuple[tuple[str, str | bytes], ...]) -> Context:
    """The trace context a caller sent in its metadata (an empty one when it sent none).

    Most gateways send none: the propagators then have nothing to find, so they are not run.
    """
    if not any(key in _TRACE_KEYS for key, _ in metadata):
        return _NO_PARENT
    return propagate.extract(dict(metadata))


def _time_left(time_remaining: float | None) -> float | None:
    """The time a call has for its work: its deadline less the margin for the answer."""
    return None if time_remaining is None else time_remaining - _ANSWER_MARGIN_S
