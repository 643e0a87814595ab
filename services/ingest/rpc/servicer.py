"""The IngestService RPCs: every endpoint's publish and stream, served over one set of books.

Handlers are registered by hand (not through the generated base class) so that each
request arrives as raw message slices (``wire.py``): the bytes written to Kafka are the
bytes the gateway sent. A publish call is ``publish.py``, a stream ``streams.py``; what both
share (admission, the issue order, the drain flag, a call's checks and logs) is
``calls.py``. Writing a request (admit, produce, results, release) is ``write/frames.py``;
the order of a gateway's requests is ``admission/ordering.py``. The deadline is checked
once per request: a publish call's before its body is read, a stream frame's before it is
written.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator, Coroutine
from typing import Any

import grpc
from opentelemetry.trace import Tracer

from headwater.endpoints import ENDPOINTS, SERVICE_NAME, Endpoint
from headwater.ingest.admission.auth import Authenticator, Gateway
from headwater.ingest.metrics import IngestMetrics
from headwater.ingest.rpc.calls import Calls
from headwater.ingest.rpc.publish import Publishes
from headwater.ingest.rpc.streams import Streams
from headwater.ingest.settings import IngestSettings
from headwater.ingest.writability import WriteOutcomes
from headwater.ingest.writers.protocol import RecordWriter


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
        self._calls = Calls(settings, writer, authenticator, tracer, metrics)
        #: The process's bounds and their books (tests read the real server's own).
        self._admission = self._calls.admission
        self._publishes = Publishes(self._calls)
        self._streams = Streams(self._calls)

    @property
    def outcomes(self) -> WriteOutcomes:
        """Whether this replica's writes reach Kafka (for its health)."""
        return self._calls.frames.outcomes

    def stream_slot(self, gateway: Gateway) -> contextlib.AbstractContextManager[None]:
        """Hold one of this replica's stream slots for ``gateway`` (other streaming RPCs)."""
        return self._admission.stream_slot(gateway)

    def begin_drain(self) -> None:
        """Refuse new work and end open streams once their frames are answered."""
        self._calls.draining.set()

    def publish(
        self,
        ep: Endpoint,
        requests: AsyncIterator[bytes] | None,
        context: grpc.aio.ServicerContext,
    ) -> Coroutine[Any, Any, object]:
        """Serve one publish call of ``ep``: the handler gRPC calls, and a benchmark's entry.

        The request is read from ``context`` (``context.read()``), never from ``requests``
        (gRPC's request iterator, unused: see ``publish.py``), so a benchmark may call it
        with None and a context of its own that hands over a request.
        """
        return self._publishes.serve(ep, requests, context)

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
                functools.partial(self._publishes.serve, ep),
                request_deserializer=None,
                response_serializer=ep.publish_response.SerializeToString,
            )
            methods[ep.stream_method] = grpc.stream_stream_rpc_method_handler(
                functools.partial(self._streams.serve, ep),
                request_deserializer=None,
                response_serializer=ep.stream_response.SerializeToString,
            )
        return grpc.method_handlers_generic_handler(SERVICE_NAME, methods)
