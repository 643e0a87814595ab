"""headwater.runtime.telemetry: the resource, and the standard OTEL_* variables honoured for real.

The OTLP test runs a real OTLP/gRPC receiver on loopback and checks what arrives.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.sdk.metrics import MeterProvider
from prometheus_client import CollectorRegistry, generate_latest

from headwater.ingest.metrics import IngestMetrics
from headwater.runtime.telemetry import (
    TelemetryConfigError,
    build_resource,
    create_telemetry,
    default_sampler,
    exporter_names,
    otlp_entry_point,
)
from headwater_dev.devstack.ports import free_port

_OTEL_VARS = [v for v in os.environ if v.startswith("OTEL_")] + ["POD_NAME", "POD_NAMESPACE"]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts without OTEL_* or downward-API variables."""
    for name in [*_OTEL_VARS, "NODE_NAME"]:
        monkeypatch.delenv(name, raising=False)


def test_resource_names_the_instance_and_the_pod_from_the_downward_api(monkeypatch):
    monkeypatch.setenv("POD_NAME", "hw-ingest-7d9f-abcde")
    monkeypatch.setenv("POD_NAMESPACE", "headwater")
    monkeypatch.setenv("NODE_NAME", "node-3")
    attrs = build_resource("headwater-ingest").attributes
    assert attrs["service.name"] == "headwater-ingest"
    assert attrs["service.instance.id"] == "hw-ingest-7d9f-abcde"
    assert attrs["k8s.pod.name"] == "hw-ingest-7d9f-abcde"
    assert attrs["k8s.namespace.name"] == "headwater"
    assert attrs["k8s.node.name"] == "node-3"
    assert attrs["service.version"]


def test_outside_kubernetes_the_instance_is_host_and_pid():
    attrs = build_resource("headwater-enricher").attributes
    assert attrs["service.instance.id"] == f"{socket.gethostname()}-{os.getpid()}"
    assert not any(k.startswith("k8s.") for k in attrs)


def test_standard_resource_variables_override_headwater_defaults(monkeypatch):
    monkeypatch.setenv("POD_NAME", "pod-1")
    monkeypatch.setenv(
        "OTEL_RESOURCE_ATTRIBUTES",
        "service.version=9.9.9,deployment.environment.name=prod,service.name=ignored",
    )
    monkeypatch.setenv("OTEL_SERVICE_NAME", "ingest-eu")
    attrs = build_resource("headwater-ingest").attributes
    assert attrs["service.version"] == "9.9.9"
    assert attrs["deployment.environment.name"] == "prod"
    assert attrs["service.name"] == "ingest-eu"  # OTEL_SERVICE_NAME beats the attribute list
    assert attrs["service.instance.id"] == "pod-1"


def test_exporters_default_to_otlp_only_with_an_endpoint(monkeypatch):
    assert exporter_names("traces") == []
    assert exporter_names("metrics") == ["prometheus"]
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
    assert exporter_names("traces") == ["otlp"]
    assert exporter_names("metrics") == ["otlp", "prometheus"]
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "none")
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console,otlp")
    assert exporter_names("metrics") == []
    assert exporter_names("traces") == ["console", "otlp"]


def test_unknown_exporter_protocol_or_sampler_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "jaeger")
    with pytest.raises(TelemetryConfigError, match="OTEL_TRACES_EXPORTER='jaeger'"):
        create_telemetry("t")
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
    with pytest.raises(TelemetryConfigError, match="OTEL_EXPORTER_OTLP_PROTOCOL='http/json'"):
        create_telemetry("t")
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_PROTOCOL")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "sometimes")
    with pytest.raises(TelemetryConfigError, match="OTEL_TRACES_SAMPLER='sometimes'"):
        create_telemetry("t")


def test_http_protobuf_is_used_when_installed_and_named_when_not(monkeypatch):
    from importlib.metadata import entry_points

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    if entry_points(group="opentelemetry_traces_exporter", name="otlp_proto_http"):
        assert otlp_entry_point("traces") == "otlp_proto_http"
    else:
        with pytest.raises(TelemetryConfigError, match="opentelemetry-exporter-otlp-proto-http"):
            otlp_entry_point("traces")
    # The per-signal variable wins over the general one.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc")
    assert otlp_entry_point("traces") == "otlp_proto_grpc"


@pytest.mark.parametrize(
    ("sampler", "arg", "sampled"),
    [("always_off", None, False), ("traceidratio", "0", False), ("traceidratio", "1", True)],
)
def test_sampler_comes_from_the_standard_variables(monkeypatch, sampler, arg, sampled):
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", sampler)
    if arg is not None:
        monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", arg)
    telemetry = create_telemetry("t")
    try:
        with telemetry.tracer_provider.get_tracer("t").start_as_current_span("s") as span:
            assert span.is_recording() is sampled
    finally:
        telemetry.shutdown()


def test_a_process_default_ratio_applies_only_when_no_sampler_is_named():
    # No ratio asked for: the SDK reads the variables (parentbased_always_on by default).
    assert default_sampler(None, {}) is None
    # A ratio asked for: parent-based, at the ratio, or at OTEL_TRACES_SAMPLER_ARG if set.
    description = default_sampler(0.1, {}).get_description()
    assert description.startswith("ParentBased{root:TraceIdRatioBased{0.1}")
    from_arg = default_sampler(0.1, {"OTEL_TRACES_SAMPLER_ARG": "1"})
    assert "TraceIdRatioBased{1.0}" in from_arg.get_description()
    # A sampler named by the operator wins over the process's default.
    assert default_sampler(0.1, {"OTEL_TRACES_SAMPLER": "always_on"}) is None
    for bad in ("2", "-0.5", "half"):
        with pytest.raises(TelemetryConfigError, match="OTEL_TRACES_SAMPLER_ARG"):
            default_sampler(0.1, {"OTEL_TRACES_SAMPLER_ARG": bad})


def test_a_default_ratio_of_zero_still_follows_a_sampled_parent_and_keeps_trace_ids():
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    telemetry = create_telemetry("t", trace_ratio=0.0)
    tracer = telemetry.tracer_provider.get_tracer("t")
    try:
        with tracer.start_as_current_span("new") as span:
            assert not span.is_recording()
            assert span.get_span_context().is_valid  # logs still carry its trace id
        parent = SpanContext(
            0xABC, 0xDEF, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED)
        )
        context = trace.set_span_in_context(NonRecordingSpan(parent))
        with tracer.start_as_current_span("child", context=context) as span:
            assert span.is_recording()
    finally:
        telemetry.shutdown()


def test_console_exporter_prints_spans_with_the_resource():
    # In a child process: the console exporter writes to the stdout it was made with.
    code = (
        "from headwater.runtime.telemetry import create_telemetry\n"
        "t = create_telemetry('headwater-test')\n"
        "with t.tracer_provider.get_tracer('t').start_as_current_span('hello'):\n"
        "    pass\n"
        "t.shutdown()\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env |= {"OTEL_TRACES_EXPORTER": "console", "POD_NAME": "pod-console"}
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    span = json.loads(result.stdout[result.stdout.index("{") :])
    assert span["name"] == "hello"
    assert span["resource"]["attributes"]["service.instance.id"] == "pod-console"


class _Receiver(trace_service_pb2_grpc.TraceServiceServicer):
    """A minimal OTLP/gRPC trace receiver that keeps what it is sent."""

    def __init__(self) -> None:
        self.requests: list[trace_service_pb2.ExportTraceServiceRequest] = []
        self.arrived = threading.Event()

    def Export(self, request, context):  # the generated method name
        self.requests.append(request)
        self.arrived.set()
        return trace_service_pb2.ExportTraceServiceResponse()


@pytest.fixture
def otlp_receiver() -> Iterator[tuple[_Receiver, int]]:
    receiver = _Receiver()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(receiver, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield receiver, port
    server.stop(grace=None)


def test_otlp_grpc_export_reaches_a_receiver_with_resource_and_attributes(
    monkeypatch, otlp_receiver
):
    receiver, port = otlp_receiver
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "none")  # traces are enough here
    monkeypatch.setenv("POD_NAME", "pod-otlp")
    monkeypatch.setenv("POD_NAMESPACE", "ns-otlp")
    telemetry = create_telemetry("headwater-ingest")
    tracer = telemetry.tracer_provider.get_tracer("t")
    with tracer.start_as_current_span("call", attributes={"rpc.system": "grpc"}):
        pass
    telemetry.shutdown()
    assert receiver.arrived.wait(10), "nothing exported to the OTLP receiver"
    (resource_spans,) = receiver.requests[0].resource_spans
    resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
    assert resource["service.name"] == "headwater-ingest"
    assert resource["service.instance.id"] == "pod-otlp"
    assert resource["k8s.namespace.name"] == "ns-otlp"
    (span,) = resource_spans.scope_spans[0].spans
    assert span.name == "call"
    assert {a.key: a.value.string_value for a in span.attributes} == {"rpc.system": "grpc"}


def test_prometheus_port_serves_counters_histograms_and_the_resource(monkeypatch):
    import urllib.request

    monkeypatch.setenv("POD_NAME", "pod-prom")
    port = free_port()
    telemetry = create_telemetry("headwater-ingest", port, "127.0.0.1")
    try:
        metrics = IngestMetrics(telemetry.meter_provider.get_meter("headwater.ingest"))
        metrics.rpc_call("headwater.ingest.v1.IngestService", "PublishTelemetry", "OK", 0.02)
        metrics.requests.add(1, {"endpoint": "telemetry", "method": "publish", "code": "OK"})
        url = f"http://127.0.0.1:{port}/metrics"
        text = urllib.request.urlopen(url, timeout=5).read().decode()
    finally:
        telemetry.shutdown()
    assert "# TYPE rpc_server_call_duration_seconds histogram" in text
    assert "# TYPE headwater_ingest_requests_total counter" in text
    assert 'rpc_grpc_status_code="0"' in text and 'rpc_method="PublishTelemetry"' in text
    assert 'service_instance_id="pod-prom"' in text  # target_info carries the resource


def test_metrics_exporter_without_prometheus_turns_the_scrape_port_off(monkeypatch):
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "console")
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "600000")
    port = free_port()
    telemetry = create_telemetry("t", port, "127.0.0.1")
    try:
        with socket.socket() as s, pytest.raises(OSError):
            s.settimeout(2)
            s.connect(("127.0.0.1", port))
    finally:
        telemetry.shutdown()


def test_a_private_registry_scrape_shows_types_by_unit():
    # Names carry the unit the instrument declares: s -> _seconds, By -> _bytes.
    registry = CollectorRegistry()
    provider = MeterProvider(metric_readers=[PrometheusMetricReader(registry=registry)])
    metrics = IngestMetrics(provider.get_meter("t"))
    metrics.received_bytes.add(10, {"endpoint": "telemetry", "code": "OK"})
    metrics.produce_duration.record(0.01, {"topic": "x"})
    text = generate_latest(registry).decode()
    provider.shutdown()
    assert "# TYPE headwater_ingest_received_bytes_total counter" in text
    assert "# TYPE headwater_ingest_produce_duration_seconds histogram" in text
