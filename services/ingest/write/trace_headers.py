"""The trace context a record carries in its headers (``traceparent``, and what else applies).

The records of a call carry its trace context, so the enricher's spans join the caller's
trace. ``propagate.inject`` writes it by the process's propagators (``OTEL_PROPAGATORS``),
but builds a context and walks every propagator per call: ~5 µs, a noticeable part of a
single-message call (docs/benchmarks.md, issue 23). With the SDK's default propagators (W3C
trace context and baggage) and no baggage in the context, what it writes is only
``traceparent`` (and ``tracestate`` when the span has one), which this writes directly; any
other case goes through ``inject``, so the headers are the same either way.
"""

from __future__ import annotations

import functools

from opentelemetry import baggage, propagate, trace
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.propagators.textmap import TextMapPropagator
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator


def trace_headers(span: trace.Span) -> list[tuple[str, bytes]]:
    """Return the headers that carry ``span``'s context (with the current baggage, if any)."""
    textmap = propagate.get_global_textmap()
    if _is_default(textmap) and not baggage.get_all():
        ctx = span.get_span_context()
        if not ctx.is_valid:
            return []
        headers = [
            (
                "traceparent",
                f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{ctx.trace_flags:02x}".encode(),
            )
        ]
        if ctx.trace_state:
            headers.append(("tracestate", ctx.trace_state.to_header().encode()))
        return headers
    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=trace.set_span_in_context(span))
    return [(key, value.encode()) for key, value in carrier.items()]


@functools.lru_cache(maxsize=4)
def _is_default(textmap: TextMapPropagator) -> bool:
    """True if ``textmap`` is exactly W3C trace context then W3C baggage (once per propagator)."""
    kinds = [type(p) for p in getattr(textmap, "_propagators", ())]
    return isinstance(textmap, CompositePropagator) and kinds == [
        TraceContextTextMapPropagator,
        W3CBaggagePropagator,
    ]
