"""Send what the spool holds to the ingest service; delete a message only after its OK.

One sender per endpoint (telemetry, alarms). Each keeps a long-lived bidirectional stream
with a window of frames in flight, and falls back to batch calls when the server does not
offer streams. Per message: OK -> deleted from the spool; a retriable error -> kept, tried
again after the server's RetryInfo delay or exponential backoff with jitter; a permanent
error (INVALID_ARGUMENT, PERMISSION_DENIED, ...) -> moved to the spool's rejected table.
So a poison message never blocks the ones behind it. Call-level failures (link down,
server overloaded, bad credentials) keep every message and back off. Every call and every
stream frame has a deadline.

Envelopes go on the wire as the spool holds them: a request is assembled from their bytes
(no parsing, no re-encoding).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from headwater.gateway.metrics import GatewayMetrics
from headwater.gateway.spool import ENDPOINTS, Pending, Spool
from headwater.proto.ingest.v1 import ingest_messages_pb2 as api
from headwater.protowire import length_field, varint_field

log = logging.getLogger(__name__)

_SERVICE = "/headwater.ingest.v1.IngestService/"
_METHODS = {
    "telemetry": (
        "PublishTelemetry",
        api.PublishTelemetryResponse,
        "StreamTelemetry",
        api.StreamTelemetryResponse,
    ),
    "alarms": (
        "PublishAlarms",
        api.PublishAlarmsResponse,
        "StreamAlarms",
        api.StreamAlarmsResponse,
    ),
}
#: Per-message codes that will never succeed on a resend.
_PERMANENT = {
    grpc.StatusCode.INVALID_ARGUMENT.value[0],
    grpc.StatusCode.PERMISSION_DENIED.value[0],
    grpc.StatusCode.FAILED_PRECONDITION.value[0],
    grpc.StatusCode.OUT_OF_RANGE.value[0],
}
_CODE_NAMES = {c.value[0]: c.name for c in grpc.StatusCode}


@dataclass(frozen=True)
class TlsConfig:
    """TLS to the ingest service; a client certificate turns it into mTLS (CN = gateway id)."""

    root_certificates: bytes | None = None
    client_certificate_chain: bytes | None = None
    client_private_key: bytes | None = None
    #: The name the server certificate is issued for, when it differs from the target host.
    server_name: str | None = None


@dataclass(frozen=True)
class GatewayConfig:
    """Where and how to send."""

    #: "host:port", or "dns:///ingest.example.com:50051" to balance over every address.
    target: str
    token: str | None = None
    tls: TlsConfig | None = None
    use_stream: bool = True
    frame_messages: int = 100
    window_frames: int = 4
    #: Deadline of a batch call, and of each stream frame's answer.
    call_timeout_s: float = 10.0
    backoff_initial_s: float = 0.2
    backoff_max_s: float = 30.0
    #: How often an idle sender looks for new or due messages (enqueues also wake it).
    idle_poll_s: float = 0.5


@dataclass(frozen=True)
class Outcome:
    """What happened to one message on one attempt (for callers that keep their own books)."""

    message_id: str
    endpoint: str
    #: "delivered", "rejected" (for good), "retry" (kept for another attempt).
    status: str
    code: str
    reason: str = ""
    partition: int = -1
    offset: int = -1


class CallFailedError(Exception):
    """A call or stream failed as a whole; every message in it stays spooled."""

    def __init__(self, code: grpc.StatusCode, reason: str, retry_delay_s: float = 0.0) -> None:
        super().__init__(f"{code.name}: {reason}")
        self.code = code
        self.reason = reason
        self.retry_delay_s = retry_delay_s


class GatewayClient:
    """Drains a spool into the ingest service until stopped (see the module docstring)."""

    def __init__(
        self,
        spool: Spool,
        config: GatewayConfig,
        on_outcome: Callable[[Outcome], None] | None = None,
        metrics: GatewayMetrics | None = None,
    ) -> None:
        self.spool = spool
        self.config = config
        self._on_outcome = on_outcome
        self._metrics = metrics or GatewayMetrics(spool)
        self._wake = {ep: asyncio.Event() for ep in ENDPOINTS}
        self._metadata = (("authorization", f"Bearer {config.token}"),) if config.token else ()
        self._channel = _channel(config)

    async def close(self) -> None:
        """Close the channel."""
        await self._channel.close()

    async def __aenter__(self) -> GatewayClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def notify(self) -> None:
        """Wake the senders: something was just enqueued."""
        for event in self._wake.values():
            event.set()

    async def enqueue(
        self, endpoint: str, device_id: str, content_type: str, payload: bytes, **kw: Any
    ) -> str:
        """Spool a message (see :meth:`Spool.enqueue`), wake the sender; return its id."""
        message = await asyncio.to_thread(
            self.spool.enqueue, endpoint, device_id, content_type, payload, **kw
        )
        self._wake[endpoint].set()
        return message.message_id

    async def run(self, stop: asyncio.Event) -> None:
        """Send until ``stop`` is set; then finish the frames in flight and return."""
        await asyncio.gather(*(self._run_endpoint(ep, stop) for ep in ENDPOINTS))

    async def drain(self, within_s: float) -> bool:
        """Send until the spool holds nothing due (or ``within_s``); True when empty."""
        stop = asyncio.Event()
        runner = asyncio.create_task(self.run(stop))
        deadline = time.monotonic() + within_s
        try:
            while time.monotonic() < deadline:
                if (await asyncio.to_thread(self.spool.stats)).depth == 0:
                    return True
                if runner.done():
                    runner.result()
                await asyncio.sleep(0.05)
            return False
        finally:
            stop.set()
            await runner

    async def _run_endpoint(self, endpoint: str, stop: asyncio.Event) -> None:
        failures = 0
        use_stream = self.config.use_stream
        while not stop.is_set():
            try:
                if use_stream:
                    await self._stream_session(endpoint, stop)
                else:
                    await self._batch_session(endpoint, stop)
                failures = 0
            except CallFailedError as exc:
                if exc.code == grpc.StatusCode.UNIMPLEMENTED and use_stream:
                    log.warning(
                        "ingest service has no streams; using batch calls",
                        extra={"endpoint": endpoint},
                    )
                    use_stream = False
                    continue
                self._metrics.call_failed(endpoint, exc.code.name)
                delay = max(exc.retry_delay_s, self._backoff(failures))
                failures += 1
                level = logging.ERROR if exc.code in _AUTH_CODES else logging.WARNING
                log.log(
                    level,
                    "ingest call failed; messages stay spooled",
                    extra={
                        "endpoint": endpoint,
                        "code": exc.code.name,
                        "reason": exc.reason,
                        "retry_in_s": round(delay, 2),
                    },
                )
                await _sleep_unless(stop, delay)

    # --- one long-lived stream --------------------------------------------------------

    async def _stream_session(self, endpoint: str, stop: asyncio.Event) -> None:
        """Keep up to ``window_frames`` frames in flight until stopped; raise on failure."""
        cfg = self.config
        _, _, method, response_type = _METHODS[endpoint]
        call = self._channel.stream_stream(
            _SERVICE + method,
            request_serializer=None,
            response_deserializer=response_type.FromString,
        )(metadata=self._metadata)
        inflight: dict[int, tuple[float, list[Pending]]] = {}
        frame_id, cursor = 0, 0
        read: asyncio.Future[Any] = asyncio.ensure_future(call.read())
        try:
            while True:
                while len(inflight) < cfg.window_frames and not stop.is_set():
                    self._wake[endpoint].clear()
                    rows = await asyncio.to_thread(
                        self.spool.due, endpoint, cfg.frame_messages, cursor
                    )
                    if not rows:
                        break
                    frame_id += 1
                    cursor = rows[-1].seq
                    inflight[frame_id] = (time.monotonic(), rows)
                    frame = varint_field(1, frame_id) + b"".join(
                        length_field(2, r.envelope) for r in rows
                    )
                    await _bounded(call.write(frame), cfg.call_timeout_s, "stream write")
                if not inflight:
                    if stop.is_set():
                        await _bounded(call.done_writing(), cfg.call_timeout_s, "stream close")
                        return
                    cursor = 0  # nothing in flight: every spooled message is eligible again
                    await self._idle(endpoint, stop, read)
                    if read.done():
                        _unexpected_answer(read)
                    continue
                oldest = min(sent for sent, _ in inflight.values())
                left = oldest + cfg.call_timeout_s - time.monotonic()
                waiters: set[asyncio.Future[Any]] = {read}
                if len(inflight) < cfg.window_frames and not stop.is_set():
                    waiters.add(asyncio.ensure_future(self._wake[endpoint].wait()))
                done, _ = await asyncio.wait(
                    waiters, timeout=max(0.0, left), return_when=asyncio.FIRST_COMPLETED
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
                    await self._settle(endpoint, rows, list(answer.results))
                    read = asyncio.ensure_future(call.read())
                elif not done and time.monotonic() >= oldest + cfg.call_timeout_s:
                    raise CallFailedError(
                        grpc.StatusCode.DEADLINE_EXCEEDED,
                        f"no answer to a frame within {cfg.call_timeout_s}s",
                    )
        except grpc.aio.AioRpcError as exc:
            failure = _call_failed(exc)
        except asyncio.InvalidStateError:  # a write after the call ended: report its status
            failure = CallFailedError(await call.code(), await call.details() or "stream ended")
        except CallFailedError as exc:
            failure = exc
        finally:
            read.cancel()
            call.cancel()
        # Unanswered frames stay spooled and are sent again (same ids: the enricher drops
        # repeats of what did reach Kafka).
        await self._kept(endpoint, [r for _, rows in inflight.values() for r in rows], failure)
        raise failure

    async def _idle(
        self, endpoint: str, stop: asyncio.Event, read: asyncio.Future[Any] | None = None
    ) -> None:
        """Wait for an enqueue, the next due retry, a stop, or (``read``) the stream ending."""
        due_in = await asyncio.to_thread(self.spool.next_due_in_s, endpoint)
        timeout = (
            self.config.idle_poll_s if due_in is None else min(due_in, self.config.idle_poll_s)
        )
        waiters = {
            asyncio.ensure_future(self._wake[endpoint].wait()),
            asyncio.ensure_future(stop.wait()),
        }
        await asyncio.wait(
            {*waiters, *([read] if read else [])},
            timeout=max(0.01, timeout),
            return_when=asyncio.FIRST_COMPLETED,
        )
        for w in waiters:
            w.cancel()

    # --- batch calls ------------------------------------------------------------------

    async def _batch_session(self, endpoint: str, stop: asyncio.Event) -> None:
        cfg = self.config
        method, response_type, _, _ = _METHODS[endpoint]
        publish = self._channel.unary_unary(
            _SERVICE + method,
            request_serializer=None,
            response_deserializer=response_type.FromString,
        )
        while not stop.is_set():
            self._wake[endpoint].clear()
            rows = await asyncio.to_thread(self.spool.due, endpoint, cfg.frame_messages, 0)
            if not rows:
                await self._idle(endpoint, stop)
                continue
            request = b"".join(length_field(1, r.envelope) for r in rows)
            try:
                response = await publish(
                    request, metadata=self._metadata, timeout=cfg.call_timeout_s
                )
            except grpc.aio.AioRpcError as exc:
                failure = _call_failed(exc)
                await self._kept(endpoint, rows, failure)
                raise failure from None
            await self._settle(endpoint, rows, list(response.results))

    # --- per message ------------------------------------------------------------------

    async def _kept(self, endpoint: str, rows: list[Pending], failure: CallFailedError) -> None:
        """Messages of a failed call stay spooled, one attempt more."""
        seqs = [r.seq for r in rows]
        await asyncio.to_thread(self.spool.retry_later, seqs, failure.retry_delay_s)
        for row in rows:
            self._report(
                Outcome(row.message_id, endpoint, "retry", failure.code.name, failure.reason)
            )

    def _report(self, outcome: Outcome) -> None:
        self._metrics.message(outcome.endpoint, outcome.status)
        if self._on_outcome is not None:
            self._on_outcome(outcome)

    async def _settle(
        self, endpoint: str, rows: list[Pending], results: list[api.MessageResult]
    ) -> None:
        """Apply one answer: delete the OKs, keep the retriable, reject the rest."""
        delivered: list[int] = []
        later: dict[float, list[int]] = {}
        outcomes: list[Outcome] = []
        answered = {r.message_id: r for r in results}
        for row in rows:
            result = answered.get(row.message_id)
            if result is None:  # not answered (should not happen): keep it
                later.setdefault(self._backoff(row.attempts), []).append(row.seq)
                continue
            code = _CODE_NAMES.get(result.code, str(result.code))
            if result.code == 0:
                delivered.append(row.seq)
                outcomes.append(
                    Outcome(
                        row.message_id,
                        endpoint,
                        "delivered",
                        code,
                        "",
                        result.partition,
                        result.offset,
                    )
                )
            elif result.error.retriable or result.code not in _PERMANENT:
                server = result.error.retry_delay.ToTimedelta().total_seconds()
                later.setdefault(max(server, self._backoff(row.attempts)), []).append(row.seq)
                outcomes.append(
                    Outcome(row.message_id, endpoint, "retry", code, result.error.reason)
                )
            else:
                await asyncio.to_thread(
                    self.spool.reject, row.seq, code, result.error.reason, result.error.message
                )
                outcomes.append(
                    Outcome(row.message_id, endpoint, "rejected", code, result.error.reason)
                )
        await asyncio.to_thread(self.spool.delivered, delivered)
        for delay, seqs in later.items():
            await asyncio.to_thread(self.spool.retry_later, seqs, delay)
        for outcome in outcomes:
            self._report(outcome)

    def _backoff(self, attempt: int) -> float:
        """Exponential backoff with full jitter."""
        cap = min(self.config.backoff_max_s, self.config.backoff_initial_s * 2 ** min(attempt, 20))
        return random.uniform(0, cap)


_AUTH_CODES = {grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED}


def _channel(config: GatewayConfig) -> grpc.aio.Channel:
    options: list[tuple[str, Any]] = [
        # Balance over every address DNS returns (one per ingest replica).
        ("grpc.lb_policy_name", "round_robin"),
        # Long-lived streams: notice a dead peer (NAT timeouts on field links).
        ("grpc.keepalive_time_ms", 30_000),
        ("grpc.keepalive_timeout_ms", 10_000),
        ("grpc.max_send_message_length", 8 * 1024 * 1024),
    ]
    tls = config.tls
    if tls is None:
        return grpc.aio.insecure_channel(config.target, options=options)
    if tls.server_name:
        options.append(("grpc.ssl_target_name_override", tls.server_name))
    credentials = grpc.ssl_channel_credentials(
        tls.root_certificates, tls.client_private_key, tls.client_certificate_chain
    )
    return grpc.aio.secure_channel(config.target, credentials, options=options)


def _call_failed(exc: grpc.aio.AioRpcError) -> CallFailedError:
    """Read the code, the ErrorInfo reason and the RetryInfo delay of a failed call."""
    reason, delay = exc.details() or "", 0.0
    status = rpc_status.from_call(exc)
    for detail in status.details if status is not None else []:
        info, retry = error_details_pb2.ErrorInfo(), error_details_pb2.RetryInfo()
        if detail.Unpack(info):
            reason = info.reason
        elif detail.Unpack(retry):
            delay = retry.retry_delay.ToTimedelta().total_seconds()
    return CallFailedError(exc.code(), reason, delay)


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


async def _sleep_unless(stop: asyncio.Event, seconds: float) -> None:
    """Sleep ``seconds``, or less if ``stop`` is set."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
