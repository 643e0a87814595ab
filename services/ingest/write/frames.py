"""The frame write path: admit a request, produce its messages in order, build the results.

One request (a publish call's body or one stream frame) goes through four steps:

1. admit: its bytes are booked against the process bound and the gateway's share
   (``admission/limits.py``) before it is parsed;
2. produce: every message that passes its checks (``messages.py``) becomes one record,
   issued when the gateway's turn comes (``admission/ordering.py``), so a device's records
   reach the producer in arrival order;
3. results: one per message, from the broker's acks (or the error that kept it out);
4. release: the bytes are given back once the producer is done with every record,
   acknowledged or failed, even after the call has answered.

The RPC shapes live in ``rpc/publish.py`` and ``rpc/streams.py``; they check the deadline
before a request comes here.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Callable, Mapping

import grpc
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Tracer
from opentelemetry.util.types import AttributeValue

from headwater import record_headers as rh
from headwater import wire
from headwater.endpoints import Endpoint
from headwater.ingest.admission.auth import Gateway
from headwater.ingest.admission.limits import Admission, Ticket
from headwater.ingest.admission.ordering import Place
from headwater.ingest.errors import (
    BrokerTimeoutError,
    BrokerUnavailableError,
    IngestError,
    InvalidMessageError,
)
from headwater.ingest.metrics import IngestMetrics
from headwater.ingest.settings import IngestSettings
from headwater.ingest.status import BROKER_RETRY_DELAY_S, error_result, from_produce_error
from headwater.ingest.writability import WriteOutcomes
from headwater.ingest.write.messages import MessageChecks, message_id_of
from headwater.ingest.write.trace_headers import trace_headers
from headwater.ingest.write.validation import batch_size_limits
from headwater.ingest.writers.protocol import RecordWriter
from headwater.proto.device.v1 import device_message_pb2
from headwater.proto.ingest.v1 import ingest_messages_pb2 as api
from headwater.runtime.conventions import messaging_attributes, record_position_attributes

#: Messages parsed and queued per event-loop step (see ``FrameWriter._produce_all``).
YIELD_EVERY = 16
#: Requests parsed and queued at once, over all gateways (see ``FrameWriter.__init__``).
CPU_LANES = 2


class FrameWriter:
    """Writes requests' messages to Kafka over one RecordWriter; one result per message."""

    def __init__(
        self,
        settings: IngestSettings,
        writer: RecordWriter,
        admission: Admission,
        tracer: Tracer,
        metrics: IngestMetrics,
    ) -> None:
        self._settings = settings
        self._writer = writer
        self._admission = admission
        self._tracer = tracer
        self._metrics = metrics
        self._checks = MessageChecks(settings.max_payload_bytes)
        self._min_batch = batch_size_limits()[0]
        #: Whether frames reach Kafka, for the server's health (``writability.py``).
        self.outcomes = WriteOutcomes()
        #: Requests between admission and their last ack wait (for the in-flight gauge).
        self.inflight_requests = 0
        # Parsing and queueing a request is the CPU-heavy part of a call. One event loop
        # runs it all, so more of them at once only interleave; and each one ready to run
        # lengthens every loop iteration, while grpc.aio starts one new call per
        # iteration. Few at a time keeps iterations short, so new calls are started (and
        # refused, if need be) as fast as they arrive instead of queueing inside gRPC.
        # A lane is taken only once the gateway's turn has come (see ``_produce_all``).
        self._cpu_lanes = asyncio.Semaphore(CPU_LANES)

    async def write(
        self,
        ep: Endpoint,
        data: bytes,
        split: Callable[[bytes], wire.RawFrame],
        gateway: Gateway,
        time_left: float | None,
        place: Place,
    ) -> tuple[wire.RawFrame, list[api.MessageResult]]:
        """Admit a request, then write every valid message of it in ``place``'s turn.

        Args:
            ep: the endpoint (topic) written.
            data: the request's bytes as received.
            split: the endpoint's deserializer (publish or stream framing).
            gateway: the authenticated caller.
            time_left: seconds the request has for its work; None: no deadline. The
                RPC has already checked that it covers a produce now.
            place: the request's place in its gateway's issue order, taken on arrival;
                handed on whatever happens here.

        Returns:
            The parsed frame and one result per message.

        Raises:
            IngestError: the request was refused as a whole (admission, framing, or the
                broker kept every message out).
        """
        try:
            ticket = self._admission.admit(gateway, len(data))
        except BaseException:
            place.leave()
            raise
        # Every record sent for this request, as it is sent: whatever ends the write (the
        # deadline, or the caller cancelling the call mid-wait), the bytes of those the
        # producer still holds stay counted until it is done with them.
        pending: list[tuple[int, str, asyncio.Future]] = []
        try:
            frame = split(data)
            self._check_frame(frame)
            budget_s = self._settings.produce_timeout_seconds
            if time_left is not None:
                budget_s = max(0.0, min(budget_s, time_left))
            deadline = asyncio.get_running_loop().time() + budget_s
            self.inflight_requests += 1
            try:
                results = await self._produce_all(ep, frame, gateway, deadline, pending, place)
            finally:
                self.inflight_requests -= 1
        finally:
            place.leave()
            _release_when_acked(ticket, [f for _, _, f in pending if not f.done()])
        self._record_messages(ep, frame, results)
        _raise_if_nothing_written(results)
        return frame, results

    def _check_frame(self, frame: wire.RawFrame) -> None:
        if frame.error:
            raise InvalidMessageError(
                frame.error,
                reason="MALFORMED_REQUEST",
                field_violations=[(frame.error_field, frame.error)] if frame.error_field else (),
            )
        count, limit = len(frame.messages), self._settings.max_batch_messages
        if count < self._min_batch or count > limit:
            raise InvalidMessageError(
                f"a request carries 1 to {limit} messages; this one has {count}",
                reason="BATCH_SIZE_OUT_OF_RANGE",
                field_violations=[("messages", f"must have 1 to {limit} entries")],
            )

    async def _produce_all(
        self,
        ep: Endpoint,
        frame: wire.RawFrame,
        gateway: Gateway,
        deadline: float,
        pending: list[tuple[int, str, asyncio.Future]],
        place: Place,
    ) -> list[api.MessageResult]:
        """Produce a frame's valid messages in its turn; wait for their acks until ``deadline``.

        ``pending`` receives (index, message id, future) of each record as it is sent.
        """
        loop = asyncio.get_running_loop()
        results: list[api.MessageResult | None] = [None] * len(frame.messages)
        last_key = ""  # the device id of the last record queued, for the span
        produce_started = time.perf_counter()
        span = trace.get_current_span()  # the call's (or stream frame's)
        if span.is_recording():
            # The producer span is a child of the call's span, but not made current: its
            # context is needed only in the records' headers (injected from it directly).
            span = self._tracer.start_span(
                f"send {ep.topic}",
                kind=SpanKind.PRODUCER,
                attributes=_send_attributes(ep.topic, len(frame.messages)),
            )
        # Else the call is not sampled (most are, by default): a child would record nothing
        # either, so none is made, and the records carry the call's context (its trace id).
        # Leaving the block ends the producer span; a span not recording ignores it.
        with span:
            common = [
                (rh.GATEWAY_ID, gateway.gateway_id.encode()),
                (rh.TENANT, gateway.tenant.encode()),
                (rh.RECEIVED_AT_MS, str(int(time.time() * 1000)).encode()),
                (rh.ENDPOINT, ep.name.encode()),
                *trace_headers(span),
            ]
            failure: Exception | None = None  # what kept the rest of the frame from Kafka
            issued = 0  # messages handled before anything had to wait
            if place.first and not self._cpu_lanes.locked():
                # Nothing to wait for (most single-message calls): issue at once, with no
                # await, timer or lane taken (no other request runs until this one
                # waits), and hand the turn on before the acks, as the block below does.
                try:
                    issued, last_key = self._issue_now(
                        ep, frame, gateway, common, results, pending, 0
                    )
                except Exception as exc:  # a send failed: the rest is not issued
                    failure = exc
                if issued == len(frame.messages) or failure is not None:
                    place.leave()
            try:
                if issued < len(frame.messages) and failure is None:
                    # One deadline for the rest of the frame, the wait for its turn
                    # included: the broker may block send() itself. The turn comes before
                    # the CPU lane, so a request waiting for an earlier one of its gateway
                    # holds no lane. The acks are awaited after the turn, so a gateway's
                    # requests still overlap at the broker.
                    async with asyncio.timeout_at(deadline):
                        try:
                            async with place.turn(), self._cpu_lanes:
                                key = await self._issue(
                                    ep, frame, gateway, common, results, pending, issued
                                )
                            last_key = key or last_key
                        except Exception as exc:  # a send failed: the rest is not issued
                            failure = exc
                if pending and failure is None and not await _settled(pending, deadline):
                    raise TimeoutError
            except TimeoutError as exc:  # the deadline, while issuing or waiting for acks
                failure = failure or exc
            if failure is not None:  # every failure becomes the results it left unwritten
                broker_error = from_produce_error(failure)
                queued = {i for i, _, _ in pending}
                for i, raw in enumerate(frame.messages):
                    if results[i] is None and i not in queued:
                        results[i] = error_result(message_id_of(raw), broker_error)
                if pending:  # the records issued before it still get their acks
                    await asyncio.wait([f for _, _, f in pending], timeout=deadline - loop.time())
            for i, message_id, future in pending:
                results[i] = _ack_result(message_id, future)
            if (
                len(frame.messages) == 1
                and pending
                and results[0] is not None
                and span.is_recording()  # else the attributes would be built for nothing
            ):
                # One record: its key and where it landed, by the messaging conventions.
                span.set_attribute("messaging.kafka.message.key", last_key)
                if results[0].code == 0:
                    span.set_attributes(
                        record_position_attributes(results[0].partition, results[0].offset)
                    )
        produce_s = time.perf_counter() - produce_started
        self._metrics.produce_duration.record(produce_s, _topic_attributes(ep.topic))
        if pending and all(r is not None and r.code == 0 for r in results):
            # Only writes that all succeeded teach the deadline check how long one takes
            # now: timeouts during a broker stall must not make it refuse every call.
            self._admission.produce_time.record(produce_s)
        self._note_outcome(failure, [results[i] for i, _, _ in pending])
        return [r for r in results if r is not None]

    def _note_outcome(
        self, failure: Exception | None, sent: list[api.MessageResult | None]
    ) -> None:
        """Tell ``outcomes`` whether Kafka took this frame's records (refusals not counted).

        One record acknowledged is enough to count as writing: during a leader election
        the other partitions still take records.
        """
        codes = [r.code if r is not None else 1 for r in sent]
        if failure is not None or any(codes):
            self.outcomes.failed()
        if 0 in codes:
            self.outcomes.succeeded()

    def _issue_now(
        self,
        ep: Endpoint,
        frame: wire.RawFrame,
        gateway: Gateway,
        common: list[tuple[str, bytes]],
        results: list[api.MessageResult | None],
        pending: list[tuple[int, str, asyncio.Future]],
        start: int,
    ) -> tuple[int, str]:
        """Check and send ``frame``'s messages from ``start`` on, in order, without waiting.

        Rejections go to ``results``, sent records to ``pending`` (as they are sent, so a
        failure part-way leaves the ones before it there). Stops before a message whose
        send would wait (the writer's queue is full) and after YIELD_EVERY messages.
        Returns where it stopped and the device id of the last record sent ("" if none).
        """
        last_key = ""
        messages = frame.messages
        end = min(len(messages), start + YIELD_EVERY)
        for i in range(start, end):
            raw = messages[i]
            record = self._record(i, raw, gateway, common, results)
            if record is None:
                continue
            msg, headers = record
            future = self._writer.send_now(ep.topic, msg.device_id.encode(), raw, headers)
            if future is None:
                return i, last_key
            pending.append((i, msg.message_id, future))
            last_key = msg.device_id
        return end, last_key

    async def _issue(
        self,
        ep: Endpoint,
        frame: wire.RawFrame,
        gateway: Gateway,
        common: list[tuple[str, bytes]],
        results: list[api.MessageResult | None],
        pending: list[tuple[int, str, asyncio.Future]],
        start: int,
    ) -> str:
        """Send ``frame``'s messages from ``start`` on as :meth:`_issue_now`, waiting as needed.

        Returns the device id of the last record sent ("" if none).
        """
        last_key = ""
        for i in range(start, len(frame.messages)):
            if i > 0 and i % YIELD_EVERY == 0:
                # Give the loop back: gRPC starts (and admission refuses) new calls only
                # between steps, one per loop iteration, so one long step per request would
                # queue new calls inside gRPC. Safe for order: the turn is held across it.
                await asyncio.sleep(0)
            raw = frame.messages[i]
            record = self._record(i, raw, gateway, common, results)
            if record is None:
                continue
            msg, headers = record
            key = msg.device_id.encode()
            future = self._writer.send_now(ep.topic, key, raw, headers)
            if future is None:  # the writer's queue is full: wait for room
                future = await self._writer.send(ep.topic, key, raw, headers)
            pending.append((i, msg.message_id, future))
            last_key = msg.device_id
        return last_key

    def _record(
        self,
        i: int,
        raw: bytes,
        gateway: Gateway,
        common: list[tuple[str, bytes]],
        results: list[api.MessageResult | None],
    ) -> tuple[device_message_pb2.DeviceMessage, list[tuple[str, bytes]]] | None:
        """Check message ``i``: its parsed form and its record's headers, or None.

        A rejected message's result goes to ``results``.
        """
        msg, rejection = self._checks.check(raw, gateway)
        if rejection is not None:
            results[i] = rejection
            return None
        headers = [
            (rh.MESSAGE_ID, msg.message_id.encode()),
            (rh.CONTENT_TYPE, msg.content_type.encode()),
            *common,
        ]
        return msg, headers

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


@functools.lru_cache(maxsize=64)
def _topic_attributes(topic: str) -> Mapping[str, AttributeValue]:
    """``headwater.ingest.produce.duration``'s attributes, once per topic (the SDK copies them)."""
    return {"topic": topic}


@functools.lru_cache(maxsize=1024)
def _send_attributes(topic: str, count: int) -> Mapping[str, AttributeValue]:
    """A producer span's attributes, built once per topic and batch size (the SDK copies them)."""
    return messaging_attributes("send", topic, batch_size=count)


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
        return error_result(message_id, from_produce_error(exc))
    md = future.result()
    return api.MessageResult(
        message_id=message_id, code=0, partition=md.partition, offset=md.offset
    )


async def _settled(pending: list[tuple[int, str, asyncio.Future]], deadline: float) -> bool:
    """Wait until every record's future is done (True) or ``deadline`` passes (False).

    One waiter and one timer (no ``asyncio.wait``, no timeout context), and like
    ``asyncio.wait`` it never cancels the futures: a record still in the producer's queue
    keeps its future, whose outcome releases the call's bytes later.
    """
    left = sum(1 for _, _, future in pending if not future.done())
    if not left:
        return True
    loop = asyncio.get_running_loop()
    waiter = loop.create_future()

    def one_done(_future: asyncio.Future) -> None:
        nonlocal left
        left -= 1
        if left == 0 and not waiter.done():
            waiter.set_result(None)

    for _, _, future in pending:
        if not future.done():
            future.add_done_callback(one_done)
    timer = loop.call_at(deadline, _expire, waiter)
    try:
        await waiter
    finally:
        timer.cancel()
    return left == 0


def _expire(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_result(None)


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
