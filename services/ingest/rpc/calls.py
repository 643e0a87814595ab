"""What the two RPC shapes share: the service's books, and one call's checks, refusals and logs.

A publish call (``publish.py``) and a stream (``streams.py``) are served over one
:class:`Calls`: the admission bounds, the frame write path, each gateway's issue order and
the drain flag are the process's, whichever shape a request comes in.
"""

from __future__ import annotations

import asyncio
import logging
import time
from types import TracebackType

import grpc
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Tracer

from headwater.endpoints import ENDPOINTS, SERVICE_NAME, Endpoint
from headwater.ingest.admission.auth import Authenticator, Gateway
from headwater.ingest.admission.limits import Admission
from headwater.ingest.admission.ordering import IssueOrder
from headwater.ingest.errors import (
    BrokerUnavailableError,
    IngestError,
    OverloadedError,
    ShuttingDownError,
)
from headwater.ingest.metrics import IngestMetrics
from headwater.ingest.settings import IngestSettings
from headwater.ingest.status import BROKER_RETRY_DELAY_S
from headwater.ingest.write.frames import FrameWriter
from headwater.ingest.writers.protocol import RecordWriter
from headwater.runtime.conventions import rpc_attributes, rpc_status_attributes

log = logging.getLogger(__name__)

#: Time kept back from the caller's deadline to send the answer before it expires.
_ANSWER_MARGIN_S = 0.05

#: Metadata keys of the trace-context propagators (W3C trace context and baggage).
_TRACE_KEYS = frozenset(("traceparent", "tracestate", "baggage"))
OK_STATUS_ATTRIBUTES = rpc_status_attributes("OK")

#: The parent of a call that sent no trace context: none (the span starts a new trace).
_NO_PARENT = Context()


class Calls:
    """The books every call of the service uses, and the checks and logs they share."""

    def __init__(
        self,
        settings: IngestSettings,
        writer: RecordWriter,
        authenticator: Authenticator,
        tracer: Tracer,
        metrics: IngestMetrics,
    ) -> None:
        self.settings = settings
        self.writer = writer
        self.auth = authenticator
        self.tracer = tracer
        self.metrics = metrics
        self.admission = Admission(settings)
        self.frames = FrameWriter(settings, writer, self.admission, tracer, metrics)
        #: Each gateway's requests in arrival order: their records are issued in it.
        self.order = IssueOrder()
        metrics.observe_inflight(lambda: (self.admission.in_use, self.frames.inflight_requests))
        metrics.observe_admission(
            lambda: self.admission.streams, self.admission.quotas.inflight_by_gateway
        )
        self.draining = asyncio.Event()
        #: Each endpoint's span attributes, built once (the SDK copies them per span).
        self.span_attrs = {
            name: rpc_attributes(SERVICE_NAME, name)
            for ep in ENDPOINTS
            for name in (ep.publish_method, ep.stream_method)
        }

    def server_span(self, name: str, method: str, parent: Context | None = None) -> CurrentSpan:
        """Start the server span of a call (or stream frame) of ``method``, for a ``with`` block."""
        span = self.tracer.start_span(
            name, context=parent, kind=SpanKind.SERVER, attributes=self.span_attrs[method]
        )
        return CurrentSpan(span)

    def authenticate(
        self, context: grpc.aio.ServicerContext, metadata: tuple[tuple[str, str | bytes], ...]
    ) -> Gateway:
        """Return the calling gateway (UnauthenticatedError when its credentials are not)."""
        # The peer's certificate names are read only where they are used (mTLS): gRPC
        # builds a new dict of the call's auth context on every auth_context() call.
        auth_context = (context.auth_context() or {}) if self.auth.mtls else {}
        return self.auth.authenticate(metadata, auth_context)

    def current_gateway(
        self, identity: tuple[Gateway, int], context: grpc.aio.ServicerContext
    ) -> tuple[Gateway, int]:
        """Return the stream's caller as the tokens table now says, with its generation.

        Only a new table (a reloaded file) costs an authentication; it raises
        UnauthenticatedError when the credentials are now revoked or unknown, and a new
        device binding applies to the frame's messages (PERMISSION_DENIED per message).
        """
        generation = self.auth.generation()
        if generation == identity[1]:
            return identity
        return self.authenticate(context, context.invocation_metadata() or ()), generation

    def check_ready(self) -> None:
        """Raise when this replica cannot write now (draining, or Kafka not reached yet)."""
        if self.draining.is_set():
            raise ShuttingDownError(
                "this ingest replica is shutting down; retry (another replica will answer)",
                retry_delay_s=0.1,
            )
        if not self.writer.connected:
            raise BrokerUnavailableError(
                "not connected to Kafka yet; retry later", retry_delay_s=BROKER_RETRY_DELAY_S
            )

    def call_done(self, rpc_method: str, attrs: dict[str, str], started: float) -> None:
        """Count one finished call (``attrs``: its endpoint, shape and status code)."""
        self.metrics.requests.add(1, attrs)
        self.metrics.rpc_call(
            SERVICE_NAME, rpc_method, attrs["code"], time.perf_counter() - started
        )

    def refused(
        self,
        ep: Endpoint,
        method: str,
        err: IngestError,
        nbytes: int,
        gateway: Gateway | None,
    ) -> None:
        """Count a refusal by gateway and limit (overload), or log the call's error."""
        if not isinstance(err, OverloadedError):
            self.log_call_error(ep, err)
            return
        attrs = {
            "endpoint": ep.name,
            "method": method,
            "gateway": gateway.gateway_id if gateway else "",
            "limit": err.limit,
        }
        self.metrics.refused_calls.add(1, attrs)
        self.metrics.refused_bytes.add(nbytes, attrs)
        # Not a log line per refusal: under overload that would be most calls. The
        # metrics carry the counts; debug level shows each one when asked for.
        log.debug(
            err.message,
            extra={"endpoint": ep.name, "code": err.code.name, "limit": err.limit, **attrs},
        )

    def log_call_error(self, ep: Endpoint, err: IngestError) -> None:
        """Log a call's error: a warning when the service's side failed, else info."""
        level = logging.WARNING if err.infrastructure else logging.INFO
        log.log(
            level,
            err.message,
            extra={"endpoint": ep.name, "code": err.code.name, "reason": err.reason},
        )


class CurrentSpan:
    """A started span, current in the ``with`` block and ended when it is left.

    What ``tracer.start_as_current_span`` does (an exception leaving the block is recorded
    on the span and sets its status to ERROR), as a class: that one is two generator-based
    context managers, entered on every call (issue 40).
    """

    __slots__ = ("_span", "_token")

    def __init__(self, span: Span) -> None:
        self._span = span
        self._token: object = None

    def __enter__(self) -> Span:
        self._token = otel_context.attach(trace.set_span_in_context(self._span))
        return self._span

    def __exit__(
        self,
        _type: type[BaseException] | None,
        exc: BaseException | None,
        _traceback: TracebackType | None,
    ) -> None:
        otel_context.detach(self._token)  # type: ignore[arg-type]
        span = self._span
        # Only Exception, as OpenTelemetry's use_span: GeneratorExit, CancelledError and
        # the like are not errors of the call.
        if isinstance(exc, Exception) and span.is_recording():
            span.record_exception(exc)
            span.set_status(trace.Status(trace.StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
        span.end()


def trace_parent(metadata: tuple[tuple[str, str | bytes], ...]) -> Context:
    """The trace context a caller sent in its metadata (an empty one when it sent none).

    Most gateways send none: the propagators then have nothing to find, so they are not run.
    """
    if not any(key in _TRACE_KEYS for key, _ in metadata):
        return _NO_PARENT
    return propagate.extract(dict(metadata))


def time_left(time_remaining: float | None) -> float | None:
    """The time a call has for its work: its deadline less the margin for the answer."""
    return None if time_remaining is None else time_remaining - _ANSWER_MARGIN_S
