"""A publish call: authenticate, admit, read its one request, hand it to the write path, answer.

Refusals come first, without a span and before the body is read: under overload they are
most calls, and each must cost as little as possible. The deadline is checked here, once,
before the body is read.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import grpc
from opentelemetry import trace

from headwater import wire
from headwater.endpoints import SERVICE_NAME, Endpoint
from headwater.ingest.admission.auth import Gateway
from headwater.ingest.errors import IngestError, InvalidMessageError
from headwater.ingest.rpc.calls import OK_STATUS_ATTRIBUTES, Calls, time_left, trace_parent
from headwater.ingest.status import to_rpc_status as rpc_status_of
from headwater.runtime.conventions import rpc_status_attributes


class Publishes:
    """Serves the publish calls of every endpoint over the service's :class:`Calls`."""

    def __init__(self, calls: Calls) -> None:
        self._calls = calls

    async def serve(
        self,
        ep: Endpoint,
        _requests: AsyncIterator[bytes] | None,
        context: grpc.aio.ServicerContext,
    ) -> object:
        """Serve one publish call of ``ep`` (the request is read from ``context``)."""
        calls = self._calls
        started = time.perf_counter()
        attrs = {"endpoint": ep.name, "method": "publish", "code": "OK"}
        gateway: Gateway | None = None
        metadata = context.invocation_metadata() or ()
        try:
            gateway = calls.authenticate(context, metadata)
            with calls.admission.rpc_slot(gateway):
                return await self._serve(ep, gateway, metadata, context, attrs)
        except IngestError as err:  # refused before its body was read: no span
            await self._refuse(ep, err, attrs, 0, gateway, context)
        finally:
            calls.call_done(ep.publish_method, attrs, started)
        raise AssertionError("unreachable: abort_with_status raises")

    async def _serve(
        self,
        ep: Endpoint,
        gateway: Gateway,
        metadata: tuple[tuple[str, str | bytes], ...],
        context: grpc.aio.ServicerContext,
        attrs: dict[str, str],
    ) -> object:
        """Serve a publish call holding its slot: check, read the body, write it.

        Refusals are raised as IngestError (answered by the caller, without a span); a
        failed write is answered here, under the call's span.
        """
        calls = self._calls
        calls.check_ready()
        left = time_left(context.time_remaining())
        calls.admission.check_deadline(left)
        calls.admission.check_room(gateway)
        reading = calls.admission.reading_body(gateway, left)
        if not reading.take_now():  # most reads go at once: no coroutine, no wait
            await reading.take()
        try:
            request = await _read_request(context)
        finally:
            reading.give()
        # The place is the arrival order of this gateway's requests (no await between the
        # body's arrival and here).
        place = calls.order.join(gateway.gateway_id)
        with calls.server_span(
            f"{SERVICE_NAME}/{ep.publish_method}", ep.publish_method, trace_parent(metadata)
        ) as span:
            try:
                _, results = await calls.frames.write(
                    ep,
                    request,
                    wire.publish_deserializer,
                    gateway,
                    time_left(context.time_remaining()),
                    place,
                )
                span.set_attributes(OK_STATUS_ATTRIBUTES)
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
        self._calls.refused(ep, "publish", err, nbytes, gateway)
        await context.abort_with_status(rpc_status_of(err))


async def _read_request(context: grpc.aio.ServicerContext) -> bytes:
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
