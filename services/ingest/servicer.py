"""The IngestService RPCs: authenticate, validate, write raw bytes to Kafka, answer.

Handlers are registered by hand (not through the generated base class) so that each
request arrives as raw message slices (``wire.py``): the bytes written to Kafka are the
bytes the gateway sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterator, Callable

import grpc
from google.protobuf.message import DecodeError
from opentelemetry import propagate, trace
from opentelemetry.trace import SpanKind, Tracer

from headwater import record_headers as rh
from headwater import wire
from headwater.endpoints import ENDPOINTS, SERVICE_NAME, Endpoint
from headwater.ingest.admission import Admission, Ticket
from headwater.ingest.auth import Authenticator, Gateway, check_device
from headwater.ingest.errors import (
    BrokerTimeoutError,
    BrokerUnavailableError,
    IngestError,
    InvalidMessageError,
    OverloadedError,
    ShuttingDownError,
    UnauthenticatedError,
)
from headwater.ingest.metrics import IngestMetrics
from headwater.ingest.producer import RecordWriter
from headwater.ingest.settings import IngestSettings
from headwater.ingest.status import BROKER_RETRY_DELAY_S, error_result, from_kafka_error
from headwater.ingest.status import to_rpc_status as rpc_status_of
from headwater.ingest.validation import DeviceMessageValidator, batch_size_limits
from headwater.proto.device.v1 import device_message_pb2
from headwater.proto.ingest.v1 import ingest_messages_pb2 as api
from headwater.runtime.conventions import (
    messaging_attributes,
    record_position_attributes,
    rpc_attributes,
    rpc_status_attributes,
)

log = logging.getLogger(__name__)

#: Time kept back from the caller's deadline to send the answer before it expires.
_ANSWER_MARGIN_S = 0.05
#: Messages parsed and queued per event-loop step (see ``_produce_all``).
_YIELD_EVERY = 16
#: Requests parsed and queued at once (see ``IngestServicer.__init__``).
_CPU_LANES = 2


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
        self._validator = DeviceMessageValidator(settings.max_payload_bytes)
        self._admission = Admission(settings)
        self._min_batch = batch_size_limits()[0]
        self._inflight_requests = 0
        metrics.observe_inflight(lambda: (self._admission.in_use, self._inflight_requests))
        metrics.observe_admission(
            lambda: self._admission.streams, self._admission.quotas.inflight_by_gateway
        )
        self._draining = asyncio.Event()
        # Parsing and queueing a request is the CPU-heavy part of a call. One event loop
        # runs it all, so more of them at once only interleave; and each one ready to run
        # lengthens every loop iteration, while grpc.aio starts one new call per
        # iteration. Few at a time keeps iterations short, so new calls are started (and
        # refused, if need be) as fast as they arrive instead of queueing inside gRPC.
        self._cpu_lanes = asyncio.Semaphore(_CPU_LANES)

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
                functools.partial(self._publish, ep),
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

    async def _publish(
        self, ep: Endpoint, requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext
    ) -> object:
        started = time.perf_counter()
        attrs = {"endpoint": ep.name, "method": "publish", "code": "OK"}
        caller: Gateway | None = None
        try:
            # Refusals first, without a span and before the body is read: under overload
            # they are most calls, and each must cost as little as possible.
            caller = self._authenticate(context)
            self._admission.enter_rpc()
        except IngestError as err:
            attrs["code"] = err.code.name
            self._metrics.requests.add(1, attrs)
            self._metrics.rpc_call(
                SERVICE_NAME, ep.publish_method, err.code.name, time.perf_counter() - started
            )
            self._refused(ep, "publish", err, 0, caller)
            await context.abort_with_status(rpc_status_of(err))
        gateway = caller
        assert gateway is not None  # abort_with_status raised otherwise
        request = b""
        try:
            try:
                self._check_ready()
                self._admission.check_deadline(_time_left(context.time_remaining()))
                self._admission.check_room(gateway)
                request = await self._read_request(requests)
            except IngestError as err:
                attrs["code"] = err.code.name
                self._refused(ep, "publish", err, len(request), gateway)
                await context.abort_with_status(rpc_status_of(err))
            parent = propagate.extract(dict(context.invocation_metadata() or ()))
            with self._tracer.start_as_current_span(
                f"{SERVICE_NAME}/{ep.publish_method}",
                context=parent,
                kind=SpanKind.SERVER,
                attributes=rpc_attributes(SERVICE_NAME, ep.publish_method),
            ) as span:
                try:
                    _, results = await self._write_frame(
                        ep, request, wire.publish_deserializer, gateway, context.time_remaining()
                    )
                    span.set_attributes(rpc_status_attributes("OK"))
                    return ep.publish_response(results=results)
                except IngestError as err:
                    attrs["code"] = err.code.name
                    span.set_attributes(rpc_status_attributes(err.code.name))
                    span.set_status(trace.Status(trace.StatusCode.ERROR, err.reason))
                    self._refused(ep, "publish", err, len(request), gateway)
                    await context.abort_with_status(rpc_status_of(err))
        finally:
            self._admission.leave_rpc()
            self._metrics.requests.add(1, attrs)
            self._metrics.request_duration.record(time.perf_counter() - started, attrs)
            self._metrics.rpc_call(
                SERVICE_NAME, ep.publish_method, attrs["code"], time.perf_counter() - started
            )
        raise AssertionError("unreachable: abort_with_status raises")

    async def _read_request(self, requests: AsyncIterator[bytes]) -> bytes:
        """Read a publish call's one request; its bytes count at the estimate meanwhile."""
        self._admission.reading += 1
        try:
            async for request in requests:
                return request
        finally:
            self._admission.reading -= 1
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
        caller: Gateway | None = None
        started = time.perf_counter()
        try:
            generation = self._auth.generation()
            caller = self._authenticate(context)
            self._admission.enter_stream()
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
        gateway = caller
        # A frame holds its window slot until its answer is handed to gRPC, so a gateway
        # that sends but does not read answers stops being read, instead of piling up
        # answers here.
        window = asyncio.Semaphore(self._settings.stream_max_inflight_frames)
        answers: asyncio.Queue[object | None] = asyncio.Queue()
        reader = asyncio.create_task(
            self._read_frames(ep, frames, (gateway, generation), answers, window, context)
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
            self._admission.leave_stream()
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
        UnauthenticatedError (raised from here) before the next frame is written.
        """
        running: set[asyncio.Task[None]] = set()

        async def answer(frame: bytes, gateway: Gateway) -> None:
            try:
                result = await self._stream_answer(ep, frame, gateway, context)
            except BaseException:
                window.release()
                raise
            answers.put_nowait(result)  # the window slot is released once it is sent

        try:
            async for frame in frames:
                await window.acquire()
                identity = self._current_gateway(identity, context)
                task = asyncio.create_task(answer(frame, identity[0]))
                running.add(task)
                task.add_done_callback(running.discard)
        except asyncio.CancelledError:
            pass  # draining: stop reading, answer what was read, then end the stream
        finally:
            if running:
                await asyncio.gather(*running, return_exceptions=True)
            answers.put_nowait(None)

    async def _stream_answer(
        self, ep: Endpoint, data: bytes, gateway: Gateway, context: grpc.aio.ServicerContext
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
            attributes=rpc_attributes(SERVICE_NAME, ep.stream_method),
        ) as span:
            try:
                frame, results = await self._write_frame(
                    ep, data, wire.stream_deserializer, gateway, time_left
                )
            except IngestError as err:
                code = err.code
                frame = wire.stream_deserializer(data)  # the frame id and message count
                if isinstance(err, OverloadedError):
                    # Refused unparsed: results by position (an empty id), one per message.
                    self._refused(ep, "stream", err, len(data), gateway)
                    results = [error_result("", err) for _ in frame.messages or [b""]]
                else:
                    self._log_call_error(ep, err)
                    results = [error_result("", err)] if frame.error else []
                    results += [error_result(_message_id(raw), err) for raw in frame.messages]
            span.set_attributes(rpc_status_attributes(code.name))
        attrs = {"endpoint": ep.name, "method": "stream", "code": code.name}
        self._metrics.request_duration.record(time.perf_counter() - started, attrs)
        return ep.stream_response(frame_id=frame.frame_id, results=results)

    # --- the write path ---------------------------------------------------------------

    def _authenticate(self, context: grpc.aio.ServicerContext) -> Gateway:
        return self._auth.authenticate(
            context.invocation_metadata() or (), context.auth_context() or {}
        )

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
        return self._authenticate(context), generation

    def _check_frame(self, frame: wire.RawFrame) -> None:
        if frame.error:
            raise InvalidMessageError(frame.error, reason="MALFORMED_REQUEST")
        count, limit = len(frame.messages), self._settings.max_batch_messages
        if count < self._min_batch or count > limit:
            raise InvalidMessageError(
                f"a request carries 1 to {limit} messages; this one has {count}",
                reason="BATCH_SIZE_OUT_OF_RANGE",
                field_violations=[("messages", f"must have 1 to {limit} entries")],
            )

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

    async def _write_frame(
        self,
        ep: Endpoint,
        data: bytes,
        split: Callable[[bytes], wire.RawFrame],
        gateway: Gateway,
        time_remaining: float | None,
    ) -> tuple[wire.RawFrame, list[api.MessageResult]]:
        """Admit a request, then write every valid message of it; one result per message."""
        self._check_ready()
        time_left = _time_left(time_remaining)
        self._admission.check_deadline(time_left)
        ticket = self._admission.admit(gateway, len(data))
        unacked: list[asyncio.Future] = []
        try:
            frame = split(data)
            self._check_frame(frame)
            budget_s = self._settings.produce_timeout_seconds
            if time_left is not None:
                budget_s = max(0.0, min(budget_s, time_left))
            deadline = asyncio.get_running_loop().time() + budget_s
            self._inflight_requests += 1
            try:
                results = await self._produce_all(ep, frame, gateway, deadline, unacked)
            finally:
                self._inflight_requests -= 1
        finally:
            _release_when_acked(ticket, unacked)
        self._record_messages(ep, frame, results)
        _raise_if_nothing_written(results)
        return frame, results

    async def _produce_all(
        self,
        ep: Endpoint,
        frame: wire.RawFrame,
        gateway: Gateway,
        deadline: float,
        unacked: list[asyncio.Future],
    ) -> list[api.MessageResult]:
        """Produce a frame's valid messages; wait for their acks until ``deadline``.

        ``unacked`` receives the records still in the producer's queue at the deadline:
        their bytes stay counted until the producer is done with them.
        """
        loop = asyncio.get_running_loop()
        results: list[api.MessageResult | None] = [None] * len(frame.messages)
        pending: list[tuple[int, str, asyncio.Future]] = []
        last_key = ""  # the device id of the last record queued, for the span
        produce_started = time.perf_counter()
        with self._tracer.start_as_current_span(
            f"send {ep.topic}",
            kind=SpanKind.PRODUCER,
            attributes=messaging_attributes("send", ep.topic, batch_size=len(frame.messages)),
        ) as span:
            carrier: dict[str, str] = {}
            propagate.inject(carrier)
            common = [
                (rh.GATEWAY_ID, gateway.gateway_id.encode()),
                (rh.TENANT, gateway.tenant.encode()),
                (rh.RECEIVED_AT_MS, str(int(time.time() * 1000)).encode()),
                (rh.ENDPOINT, ep.name.encode()),
                *((k, v.encode()) for k, v in carrier.items()),
            ]
            try:
                # One deadline for the whole frame: the broker may block send() itself.
                async with asyncio.timeout_at(deadline), self._cpu_lanes:
                    for i, raw in enumerate(frame.messages):
                        if i % _YIELD_EVERY == _YIELD_EVERY - 1:
                            # Give the loop back: gRPC starts (and admission refuses) new
                            # calls only between steps, one per loop iteration, so one
                            # long step per request would queue new calls inside gRPC.
                            await asyncio.sleep(0)
                        msg, rejection = self._admit(raw, gateway)
                        if rejection is not None:
                            results[i] = rejection
                            continue
                        headers = [
                            (rh.MESSAGE_ID, msg.message_id.encode()),
                            (rh.CONTENT_TYPE, msg.content_type.encode()),
                            *common,
                        ]
                        future = await self._writer.send(
                            ep.topic, msg.device_id.encode(), raw, headers
                        )
                        pending.append((i, msg.message_id, future))
                        last_key = msg.device_id
            except Exception as exc:  # every failure, the deadline included, becomes a result
                broker_error = from_kafka_error(exc)
                queued = {i for i, _, _ in pending}
                for i, raw in enumerate(frame.messages):
                    if results[i] is None and i not in queued:
                        results[i] = error_result(_message_id(raw), broker_error)
            if pending:
                await asyncio.wait([f for _, _, f in pending], timeout=deadline - loop.time())
            for i, message_id, future in pending:
                results[i] = _ack_result(message_id, future)
                if not future.done():
                    unacked.append(future)
            if len(frame.messages) == 1 and pending and results[0] is not None:
                # One record: its key and where it landed, by the messaging conventions.
                span.set_attribute("messaging.kafka.message.key", last_key)
                if results[0].code == 0:
                    span.set_attributes(
                        record_position_attributes(results[0].partition, results[0].offset)
                    )
        produce_s = time.perf_counter() - produce_started
        self._metrics.produce_duration.record(produce_s, {"topic": ep.topic})
        if pending and all(r is not None and r.code == 0 for r in results):
            # Only writes that all succeeded teach the deadline check how long one takes
            # now: timeouts during a broker stall must not make it refuse every call.
            self._admission.produce_time.record(produce_s)
        return [r for r in results if r is not None]

    def _admit(
        self, raw: bytes, gateway: Gateway
    ) -> tuple[device_message_pb2.DeviceMessage, api.MessageResult | None]:
        """Parse and check one message; return it and a rejection result, if any."""
        try:
            msg = device_message_pb2.DeviceMessage.FromString(raw)
        except DecodeError:
            err = InvalidMessageError(
                "message is not a valid headwater.device.v1.DeviceMessage",
                reason="MALFORMED_MESSAGE",
            )
            return device_message_pb2.DeviceMessage(), error_result("", err)
        violations = self._validator.violations(msg)
        if violations:
            only_payload = all(f == "payload" for f, _ in violations) and msg.payload
            err = InvalidMessageError(
                "; ".join(f"{f} {d}" for f, d in violations),
                reason="PAYLOAD_TOO_LARGE" if only_payload else "INVALID_MESSAGE",
                field_violations=violations,
            )
            return msg, error_result(msg.message_id, err)
        try:
            check_device(gateway, msg.device_id)
        except IngestError as err:
            return msg, error_result(msg.message_id, err)
        return msg, None

    def _record_messages(
        self, ep: Endpoint, frame: wire.RawFrame, results: list[api.MessageResult]
    ) -> None:
        by_code: dict[int, tuple[int, int]] = {}
        for raw, result in zip(frame.messages, results, strict=False):
            count, size = by_code.get(result.code, (0, 0))
            by_code[result.code] = (count + 1, size + len(raw))
        for code, (count, size) in by_code.items():
            attrs = {"endpoint": ep.name, "code": _CODE_NAMES[code]}
            self._metrics.messages.add(count, attrs)
            self._metrics.received_bytes.add(size, attrs)

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


def _time_left(time_remaining: float | None) -> float | None:
    """The time a call has for its work: its deadline less the margin for the answer."""
    return None if time_remaining is None else time_remaining - _ANSWER_MARGIN_S


def _ack_result(message_id: str, future: asyncio.Future) -> api.MessageResult:
    if not future.done():
        # Retrieve the outcome later so a late failure is not reported as never-retrieved.
        future.add_done_callback(_swallow)
        return error_result(
            message_id,
            BrokerTimeoutError(
                "no broker acknowledgement within the deadline; the message may or may not "
                "be stored, resend it with the same message_id",
                retry_delay_s=BROKER_RETRY_DELAY_S,
            ),
        )
    exc = future.exception()
    if exc is not None:
        return error_result(message_id, from_kafka_error(exc))
    md = future.result()
    return api.MessageResult(
        message_id=message_id, code=0, partition=md.partition, offset=md.offset
    )


def _release_when_acked(ticket: Ticket, unacked: list[asyncio.Future]) -> None:
    """Release a call's bytes now, or once the producer is done with its last record."""
    if not unacked:
        ticket.release()
        return
    left = len(unacked)

    def one_done(_future: asyncio.Future) -> None:
        nonlocal left
        left -= 1
        if left == 0:
            ticket.release()

    for future in unacked:
        future.add_done_callback(one_done)


def _swallow(future: asyncio.Future) -> None:
    with contextlib.suppress(BaseException):
        future.exception()


def _raise_if_nothing_written(results: list[api.MessageResult]) -> None:
    """Fail the whole call when the broker (not the messages) kept every one out.

    Gateways' standard retry policies then see UNAVAILABLE / DEADLINE_EXCEEDED directly.
    """
    if any(r.code == 0 for r in results):
        return
    for r in results:
        if r.error.reason in _INFRA_REASONS:
            raise _INFRA_REASONS[r.error.reason](
                r.error.message,
                reason=r.error.reason,
                retry_delay_s=BROKER_RETRY_DELAY_S,
                kafka_error=r.error.kafka_error,
            )


_INFRA_REASONS: dict[str, Callable[..., IngestError]] = {
    BrokerUnavailableError.reason: BrokerUnavailableError,
    BrokerTimeoutError.reason: BrokerTimeoutError,
}


_CODE_NAMES = {c.value[0]: c.name for c in grpc.StatusCode}


def _message_id(raw: bytes) -> str:
    try:
        return device_message_pb2.DeviceMessage.FromString(raw).message_id
    except DecodeError:
        return ""
