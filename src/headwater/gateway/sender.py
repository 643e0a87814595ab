"""Send one endpoint's spooled messages; delete a message only after its OK.

A long-lived bidirectional stream with a window of frames in flight, or batch calls when
the server offers no streams. Per message: OK -> deleted; retriable -> kept and tried
again after the server's RetryInfo delay or exponential backoff with full jitter;
permanent -> moved to the rejected table, so a poison message never blocks the ones
behind it. Call-level failures (link down, overload, bad credentials) keep every message
and back off. Every call and every stream frame has a deadline.

Pushback: a RESOURCE_EXHAUSTED (or UNAVAILABLE) answer with a RetryInfo delay pauses the
whole endpoint for that delay, not just the refused messages: the server is saying it has
no room, so sending more frames meanwhile would only be refused too.

Envelopes go on the wire as the spool holds them: a request is assembled from their bytes
(no parsing, no re-encoding).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

import grpc

from headwater.endpoints import BY_NAME, SERVICE_NAME
from headwater.gateway.answers import OVERLOADED, DeliveryReport, call_failed
from headwater.gateway.channel import sleep_unless
from headwater.gateway.config import GatewayConfig
from headwater.gateway.errors import CallFailedError
from headwater.gateway.metrics import GatewayMetrics
from headwater.gateway.records import DueMessage
from headwater.gateway.settle import SpoolKeeper
from headwater.gateway.spool import Spool
from headwater.proto.ingest.v1 import ingest_messages_pb2 as api
from headwater.wire import length_field, varint_field

log = logging.getLogger(__name__)

_SERVICE = f"/{SERVICE_NAME}/"
_AUTH_CODES = {grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED}
_PASSING = (
    "none if it passes: the sender retries by itself (a Kafka leader election takes 10-20 s); "
    "if it lasts minutes, check the ingest service's health and logs and the link to it"
)
#: What an operator does next, by the failed call's code (in the log line).
_NEXT_STEP = {
    grpc.StatusCode.UNAVAILABLE: _PASSING,
    grpc.StatusCode.DEADLINE_EXCEEDED: _PASSING,
    grpc.StatusCode.RESOURCE_EXHAUSTED: "none if it passes (ingest is at capacity); if it "
    "lasts, add ingest replicas or raise this gateway's limits in ingest's tokens file",
    grpc.StatusCode.UNAUTHENTICATED: "fix the gateway's token or client certificate; the "
    "messages wait in the spool until then",
    grpc.StatusCode.PERMISSION_DENIED: "grant this gateway the endpoint or device in ingest's "
    "tokens file; the messages wait in the spool until then",
}
_NEXT_STEP_OTHER = "if it repeats, read the ingest service's logs for this gateway"


class EndpointSender:
    """Drains one endpoint's messages from the spool until stopped."""

    def __init__(
        self,
        endpoint: str,
        spool: Spool,
        channel: grpc.aio.Channel,
        config: GatewayConfig,
        metrics: GatewayMetrics,
        on_outcome: Callable[[DeliveryReport], None] | None,
        wake: asyncio.Event,
    ) -> None:
        self.endpoint = endpoint
        self.spool = spool
        self.config = config
        self._channel = channel
        self._metrics = metrics
        self._books = SpoolKeeper(endpoint, spool, config, metrics, on_outcome)
        self._wake = wake
        self._metadata = (("authorization", f"Bearer {config.token}"),) if config.token else ()
        # Shrunk when the server says frames are too big; never grown back (a restart does).
        self._frame_messages = config.frame_messages
        self._frame_bytes = config.frame_max_bytes
        self._paused_until = 0.0
        self._progress = False

    async def run(self, stop: asyncio.Event) -> None:
        """Send until ``stop`` is set; then finish the frames in flight and return."""
        failures = 0
        use_stream = self.config.use_stream
        while not stop.is_set():
            self._progress = False
            try:
                if use_stream:
                    await self._stream_session(stop)
                else:
                    await self._batch_session(stop)
            except CallFailedError as exc:
                if exc.code == grpc.StatusCode.UNIMPLEMENTED and use_stream:
                    log.warning(
                        "ingest service has no streams; using batch calls",
                        extra={"endpoint": self.endpoint},
                    )
                    use_stream = False
                    continue
                failures = 0 if self._progress else failures
                delay = max(exc.retry_delay_s, self._books.backoff(failures))
                failures += 1
                self._failed(exc, delay)
                await sleep_unless(stop, delay, self._channel)

    def _failed(self, exc: CallFailedError, delay: float) -> None:
        self._metrics.call_failed(self.endpoint, exc.code.name)
        if exc.reason == "BATCH_SIZE_OUT_OF_RANGE" or (
            exc.code == grpc.StatusCode.RESOURCE_EXHAUSTED and exc.reason != OVERLOADED
        ):
            self._shrink(exc.reason)
        log.log(
            logging.ERROR if exc.code in _AUTH_CODES else logging.WARNING,
            "ingest call failed; messages stay spooled",
            extra={
                "endpoint": self.endpoint,
                "code": exc.code.name,
                "reason": exc.reason,
                "retry_in_s": round(delay, 2),
                "spool_depth": self.spool.depth,
                "next_step": _NEXT_STEP.get(exc.code, _NEXT_STEP_OTHER),
            },
        )

    def _shrink(self, reason: str) -> None:
        """Halve the frames: the server refused their count or their size."""
        if reason == "BATCH_SIZE_OUT_OF_RANGE":
            self._frame_messages = max(1, self._frame_messages // 2)
        else:
            self._frame_bytes = max(1, self._frame_bytes // 2)
        log.warning(
            "ingest service refused a frame as too big; sending smaller frames",
            extra={
                "endpoint": self.endpoint,
                "reason": reason,
                "frame_messages": self._frame_messages,
                "frame_max_bytes": self._frame_bytes,
            },
        )

    def _pause_left(self) -> float:
        return self._paused_until - time.monotonic()

    async def _due(self, cursor: int = 0, skip: set[int] | None = None) -> list[DueMessage]:
        return await asyncio.to_thread(
            self.spool.due,
            self.endpoint,
            self._frame_messages,
            cursor,
            self._frame_bytes,
            skip or (),
        )

    def _full(self, rows: list[DueMessage]) -> bool:
        return (
            len(rows) >= self._frame_messages
            or 2 * sum(len(r.envelope) for r in rows) >= self._frame_bytes
        )

    # --- one long-lived stream --------------------------------------------------------

    async def _stream_session(self, stop: asyncio.Event) -> None:
        """Keep up to ``window_frames`` frames in flight until stopped; raise on failure."""
        cfg = self.config
        ep = BY_NAME[self.endpoint]
        method, response_type = ep.stream_method, ep.stream_response
        call = self._channel.stream_stream(
            _SERVICE + method,
            request_serializer=None,
            response_deserializer=response_type.FromString,
        )(metadata=self._metadata)
        inflight: dict[int, tuple[float, list[DueMessage]]] = {}
        # Retried messages sit below the cursor: the ones in flight again must be skipped.
        retried_inflight: set[int] = set()
        frame_id, cursor = 0, 0
        read: asyncio.Future[Any] = asyncio.ensure_future(call.read())
        try:
            while True:
                while (
                    len(inflight) < cfg.window_frames
                    and not stop.is_set()
                    and self._pause_left() <= 0
                ):
                    self._wake.clear()
                    rows = await self._due(cursor, retried_inflight)
                    if not rows or (inflight and not self._full(rows)):
                        # A part-filled frame waits while others are in flight: an answer
                        # or more messages come soon, and fewer, fuller frames carry more
                        # (like Nagle). With nothing in flight it goes at once.
                        break
                    frame_id += 1
                    cursor = max(cursor, rows[-1].seq)
                    retried_inflight.update(r.seq for r in rows if r.attempts)
                    inflight[frame_id] = (time.monotonic(), rows)
                    frame = varint_field(1, frame_id) + b"".join(
                        length_field(2, r.envelope) for r in rows
                    )
                    await _bounded(call.write(frame), cfg.call_timeout_s, "stream write")
                if not inflight:
                    if stop.is_set():
                        # Nothing is in flight; a call that failed already (server
                        # unreachable) raises grpc's internal ExecuteBatchError on close.
                        with contextlib.suppress(Exception):
                            await _bounded(call.done_writing(), cfg.call_timeout_s, "stream close")
                        return
                    cursor = 0  # nothing in flight: every spooled message is eligible again
                    await self._idle(stop, read)
                    if read.done():
                        _unexpected_answer(read)
                    continue
                oldest = min(sent for sent, _ in inflight.values())
                timeout = oldest + cfg.call_timeout_s - time.monotonic()
                waiters: set[asyncio.Future[Any]] = {read}
                if len(inflight) < cfg.window_frames and not stop.is_set():
                    if self._pause_left() > 0:
                        timeout = min(timeout, self._pause_left())
                    else:
                        waiters.add(asyncio.ensure_future(self._wake.wait()))
                done, _ = await asyncio.wait(
                    waiters, timeout=max(0.0, timeout), return_when=asyncio.FIRST_COMPLETED
                )
                for w in waiters - {read}:
                    w.cancel()
                if read in done:
                    answer = read.result()
                    if answer is grpc.aio.EOF:
                        raise CallFailedError(
                            grpc.StatusCode.UNAVAILABLE, "server ended the stream (draining)"
                        )
                    if answer.frame_id not in inflight:
                        raise CallFailedError(
                            grpc.StatusCode.INTERNAL, f"answer to unknown frame {answer.frame_id}"
                        )
                    _, rows = inflight.pop(answer.frame_id)
                    retried_inflight.difference_update(r.seq for r in rows)
                    await self._settle(rows, list(answer.results))
                    read = asyncio.ensure_future(call.read())
                elif time.monotonic() >= oldest + cfg.call_timeout_s:
                    raise CallFailedError(
                        grpc.StatusCode.DEADLINE_EXCEEDED,
                        f"no answer to a frame within {cfg.call_timeout_s}s",
                    )
        except grpc.aio.AioRpcError as exc:
            failure = call_failed(exc)
        except asyncio.InvalidStateError:  # a write after the call ended: report its status
            failure = CallFailedError(await call.code(), await call.details() or "stream ended")
        except CallFailedError as exc:
            failure = exc
        finally:
            read.cancel()
            call.cancel()
        # Unanswered frames stay spooled and are sent again (same ids: the enricher drops
        # repeats of what did reach Kafka).
        await self._kept([r for _, rows in inflight.values() for r in rows], failure)
        raise failure

    async def _idle(self, stop: asyncio.Event, read: asyncio.Future[Any] | None = None) -> None:
        """Wait for an enqueue, the next due retry, the end of a pause, a stop, or ``read``."""
        waiters = {asyncio.ensure_future(stop.wait())}
        pause = self._pause_left()
        if pause > 0:
            timeout = pause
        else:
            due_in = await asyncio.to_thread(self.spool.next_due_in_s, self.endpoint)
            timeout = self.config.idle_poll_s if due_in is None else due_in
            timeout = min(timeout, self.config.idle_poll_s)
            waiters.add(asyncio.ensure_future(self._wake.wait()))
        await asyncio.wait(
            {*waiters, *([read] if read else [])},
            timeout=max(0.01, timeout),
            return_when=asyncio.FIRST_COMPLETED,
        )
        for w in waiters:
            w.cancel()

    # --- batch calls ------------------------------------------------------------------

    async def _batch_session(self, stop: asyncio.Event) -> None:
        ep = BY_NAME[self.endpoint]
        method, response_type = ep.publish_method, ep.publish_response
        publish = self._channel.unary_unary(
            _SERVICE + method,
            request_serializer=None,
            response_deserializer=response_type.FromString,
        )
        while not stop.is_set():
            if self._pause_left() > 0:
                await self._idle(stop)
                continue
            self._wake.clear()
            rows = await self._due()
            if not rows:
                await self._idle(stop)
                continue
            request = b"".join(length_field(1, r.envelope) for r in rows)
            try:
                response = await publish(
                    request, metadata=self._metadata, timeout=self.config.call_timeout_s
                )
            except grpc.aio.AioRpcError as exc:
                failure = call_failed(exc)
                await self._kept(rows, failure)
                raise failure from None
            await self._settle(rows, list(response.results))

    # --- per message ------------------------------------------------------------------

    async def _kept(self, rows: list[DueMessage], failure: CallFailedError) -> None:
        await self._books.keep(rows, failure)

    async def _settle(self, rows: list[DueMessage], results: list[api.MessageResult]) -> None:
        """Apply one answer, and what it says about the server: pushback, frame size."""
        self._progress = True
        settled = await self._books.settle(rows, results)
        if settled.pause_s:
            self._paused_until = max(self._paused_until, time.monotonic() + settled.pause_s)
        if settled.frame_too_big:
            self._shrink("BATCH_SIZE_OUT_OF_RANGE")


def _unexpected_answer(read: asyncio.Future[Any]) -> None:
    answer = read.result()  # raises the call's error, if that is what ended it
    if answer is grpc.aio.EOF:
        raise CallFailedError(grpc.StatusCode.UNAVAILABLE, "server ended the stream (draining)")
    raise CallFailedError(grpc.StatusCode.INTERNAL, "answer to a frame that was not sent")


async def _bounded(awaitable: Any, timeout_s: float, what: str) -> None:
    try:
        await asyncio.wait_for(awaitable, timeout_s)
    except TimeoutError:
        raise CallFailedError(
            grpc.StatusCode.DEADLINE_EXCEEDED, f"{what} took over {timeout_s}s"
        ) from None
