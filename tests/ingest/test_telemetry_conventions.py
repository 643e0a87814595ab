"""The ingest service's spans and metrics by the OpenTelemetry conventions, on a real broker.

Spans are caught with an in-memory exporter on the server's own tracer provider; metrics are
read from a Prometheus scrape of its meter provider (the names and types a collector sees).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from headwater.ingest.rpc.server import IngestServer
from headwater.ingest.settings import IngestSettings
from headwater.proto.ingest.v1 import ingest_messages_pb2 as api
from headwater.proto.ingest.v1 import ingest_service_pb2_grpc
from headwater.runtime.telemetry import create_telemetry

from .conftest import bearer, device_message

SERVICE = "headwater.ingest.v1.IngestService"


async def _serve(
    settings: IngestSettings, body: Callable[[ingest_service_pb2_grpc.IngestServiceStub], Any]
) -> tuple[list[ReadableSpan], str]:
    """Run one server with span and scrape capture around ``body``; return spans, scrape."""
    registry = CollectorRegistry()
    telemetry = create_telemetry(
        "test-ingest", extra_readers=(PrometheusMetricReader(registry=registry),)
    )
    spans = InMemorySpanExporter()
    telemetry.tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    server = IngestServer(settings, telemetry=telemetry)
    await server.start()
    try:
        await server.ready(within_s=15)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            await body(ingest_service_pb2_grpc.IngestServiceStub(channel))
        text = generate_latest(registry).decode()  # before stop: shutdown unregisters
    finally:
        await server.stop(grace_s=1)
    return list(spans.get_finished_spans()), text


def _count(
    text: str, sample_name: str = "rpc_server_call_duration_seconds_count", **labels: str
) -> float:
    """Return a histogram's count (rpc.server.call.duration's calls) for matching series."""
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == sample_name and all(sample.labels.get(k) == v for k, v in labels.items())
    )


def _by_kind(spans: list[ReadableSpan], kind: SpanKind) -> list[ReadableSpan]:
    return [s for s in spans if s.kind == kind]


async def test_publish_spans_carry_rpc_and_messaging_attributes(ingest_settings):
    message = device_message("acme-span-1")
    answers: list[api.PublishTelemetryResponse] = []

    async def body(stub):
        answers.append(
            await stub.PublishTelemetry(
                api.PublishTelemetryRequest(messages=[message]), metadata=bearer(), timeout=10
            )
        )
        # A refused call (unknown token) still ends with its status code on the metric.
        try:
            await stub.PublishTelemetry(
                api.PublishTelemetryRequest(messages=[message]),
                metadata=[("authorization", "Bearer nope")],
                timeout=10,
            )
        except grpc.aio.AioRpcError as err:
            assert err.code() == grpc.StatusCode.UNAUTHENTICATED

    spans, text = await _serve(ingest_settings, body)
    (result,) = answers[0].results
    (server,) = _by_kind(spans, SpanKind.SERVER)
    assert server.name == f"{SERVICE}/PublishTelemetry"
    assert dict(server.attributes or {}) == {
        "rpc.system": "grpc",
        "rpc.system.name": "grpc",
        "rpc.service": SERVICE,
        "rpc.method": "PublishTelemetry",
        "rpc.grpc.status_code": 0,
        "rpc.response.status_code": "OK",
    }
    (send,) = _by_kind(spans, SpanKind.PRODUCER)
    assert send.parent is not None and send.parent.span_id == server.context.span_id
    assert dict(send.attributes or {}) == {
        "messaging.system": "kafka",
        "messaging.destination.name": "ingest.telemetry.v1",
        "messaging.operation.type": "send",
        "messaging.operation.name": "send",
        "messaging.kafka.message.key": "acme-span-1",
        "messaging.destination.partition.id": str(result.partition),
        "messaging.kafka.offset": result.offset,
    }
    # The scrape: the convention's histogram in seconds, with the status code as a number.
    assert "# TYPE rpc_server_call_duration_seconds histogram" in text
    for code in ("0", "16"):  # OK, UNAUTHENTICATED
        assert _count(text, rpc_method="PublishTelemetry", rpc_grpc_status_code=code) == 1, code


async def test_stream_frames_are_server_spans_and_a_batch_send_has_no_record_attributes(
    ingest_settings,
):
    frames = [
        api.StreamTelemetryRequest(
            frame_id=i, messages=[device_message(f"acme-st-{i}-{j}") for j in range(3)]
        )
        for i in range(2)
    ]

    async def body(stub):
        async def requests():
            for frame in frames:
                yield frame

        answers = [a async for a in stub.StreamTelemetry(requests(), metadata=bearer(), timeout=20)]
        assert len(answers) == 2

    spans, text = await _serve(ingest_settings, body)
    servers = _by_kind(spans, SpanKind.SERVER)
    assert len(servers) == 2
    for span in servers:
        attrs = dict(span.attributes or {})
        assert attrs["rpc.method"] == "StreamTelemetry"
        assert attrs["rpc.grpc.status_code"] == 0
    sends = _by_kind(spans, SpanKind.PRODUCER)
    assert len(sends) == 2
    for send in sends:
        attrs = dict(send.attributes or {})
        assert attrs["messaging.batch.message_count"] == 3
        assert attrs["messaging.operation.type"] == "send"
        assert "messaging.kafka.message.key" not in attrs  # three records, three keys
    # The whole stream is one call on the convention's metric; each frame is on its own.
    assert _count(text, rpc_method="StreamTelemetry", rpc_grpc_status_code="0") == 1
    frames = _count(text, "headwater_ingest_frame_duration_seconds_count", code="OK")
    assert frames == 2


async def test_scrape_has_only_counters_histograms_and_holding_gauges(ingest_settings):
    async def body(stub):
        await stub.PublishTelemetry(
            api.PublishTelemetryRequest(messages=[device_message("acme-types")]),
            metadata=bearer(),
            timeout=10,
        )

    _spans, text = await _serve(ingest_settings, body)
    types = {
        line.split()[2]: line.split()[3]
        for line in text.splitlines()
        if line.startswith("# TYPE headwater_ingest_") or line.startswith("# TYPE rpc_")
    }
    assert types["headwater_ingest_requests_total"] == "counter"
    assert types["headwater_ingest_messages_total"] == "counter"
    assert types["headwater_ingest_received_bytes_total"] == "counter"
    # A publish call's latency is on the convention's histogram only (once per call).
    assert "headwater_ingest_request_duration_seconds" not in types
    assert types["headwater_ingest_produce_duration_seconds"] == "histogram"
    assert types["rpc_server_call_duration_seconds"] == "histogram"
    gauges = {name for name, kind in types.items() if kind == "gauge"}
    # Gauges only for what is held right now; never a rate or a quantile.
    assert {"headwater_ingest_inflight_bytes", "headwater_ingest_open_streams"} <= gauges
    assert gauges <= {
        "headwater_ingest_inflight_bytes",
        "headwater_ingest_inflight_requests",
        "headwater_ingest_open_streams",
        "headwater_ingest_gateway_inflight_bytes",
        # The cluster as the last look found it (writability.py).
        "headwater_ingest_unwritable_partitions",
        "headwater_ingest_kafka_under_replicated_partitions",
        "headwater_ingest_kafka_offline_partitions",
        "headwater_ingest_kafka_writable",
    }
    for name in gauges:
        assert not any(w in name for w in ("per_second", "rate", "p99", "quantile")), name
    for name, kind in types.items():
        if kind == "counter":
            assert name.endswith("_total"), name
        if kind == "histogram":
            assert name.endswith(("_seconds", "_bytes")), name
