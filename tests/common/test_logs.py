"""JSON logs carry the trace id and extra fields."""

from __future__ import annotations

import json
import logging

from opentelemetry.sdk.trace import TracerProvider

from headwater.runtime.logs import JsonFormatter


def test_log_line_is_json_with_trace_id_and_extras():
    tracer = TracerProvider().get_tracer("test")
    logger = logging.getLogger("headwater.test")
    record_holder = []

    class Capture(logging.Handler):
        def emit(self, record):
            record_holder.append(JsonFormatter().format(record))

    handler = Capture()
    logger.addHandler(handler)
    try:
        with tracer.start_as_current_span("op") as span:
            logger.warning("broker down", extra={"endpoint": "telemetry", "retry_in_s": 1.5})
            trace_id = format(span.get_span_context().trace_id, "032x")
    finally:
        logger.removeHandler(handler)
    entry = json.loads(record_holder[0])
    assert entry["message"] == "broker down"
    assert entry["level"] == "warning"
    assert entry["trace_id"] == trace_id
    assert entry["endpoint"] == "telemetry" and entry["retry_in_s"] == 1.5
