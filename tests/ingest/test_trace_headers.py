"""The record trace headers are exactly what ``propagate.inject`` would write."""

from __future__ import annotations

import pytest
from opentelemetry import baggage, context, propagate, trace
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from headwater.ingest.write.trace_headers import trace_headers


def injected(span: trace.Span) -> list[tuple[str, bytes]]:
    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=trace.set_span_in_context(span))
    return [(k, v.encode()) for k, v in carrier.items()]


@pytest.mark.parametrize("sampler", [ALWAYS_ON, ALWAYS_OFF], ids=["sampled", "not-sampled"])
def test_a_span_gives_the_headers_inject_writes(sampler: object) -> None:
    span = TracerProvider(sampler=sampler).get_tracer("t").start_span("call")  # type: ignore[arg-type]
    headers = trace_headers(span)
    assert headers == injected(span)
    assert [k for k, _ in headers] == ["traceparent"]


def test_a_trace_state_and_baggage_go_along() -> None:
    span = NonRecordingSpan(
        SpanContext(
            trace_id=0x0AF7651916CD43DD8448EB211C80319C,
            span_id=0xB7AD6B7169203331,
            is_remote=False,
            trace_flags=TraceFlags(TraceFlags.SAMPLED),
            trace_state=TraceState([("vendor", "x1")]),
        )
    )
    headers = trace_headers(span)
    assert headers == injected(span)
    assert headers[0] == (
        "traceparent",
        b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    )
    assert headers[1] == ("tracestate", b"vendor=x1")
    token = context.attach(baggage.set_baggage("site", "plant-7"))
    try:
        with_baggage = trace_headers(span)
        assert with_baggage == injected(span)
        assert ("baggage", b"site=plant-7") in with_baggage
    finally:
        context.detach(token)


def test_other_propagators_are_honoured() -> None:
    span = TracerProvider().get_tracer("t").start_span("call")
    default = propagate.get_global_textmap()

    class Extra(TraceContextTextMapPropagator):
        def inject(self, carrier, context=None, setter=None):  # type: ignore[no-untyped-def]
            carrier["x-extra"] = "1"

    propagate.set_global_textmap(CompositePropagator([TraceContextTextMapPropagator(), Extra()]))
    try:
        headers = trace_headers(span)
        assert headers == injected(span)
        assert ("x-extra", b"1") in headers
    finally:
        propagate.set_global_textmap(default)


def test_an_invalid_span_gives_no_headers() -> None:
    assert trace_headers(trace.INVALID_SPAN) == [] == injected(trace.INVALID_SPAN)
