"""OpenTelemetry for Headwater processes: traces and metrics, OTLP and Prometheus.

Exporters are chosen by configuration: OTLP when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set
(the standard OpenTelemetry variable), a Prometheus scrape endpoint when a port is given.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

log = logging.getLogger(__name__)

#: Histogram buckets for durations in seconds, from 1 ms to 30 s.
SECONDS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


@dataclass
class Telemetry:
    """The tracer and meter providers of one process, and how to shut them down."""

    tracer_provider: TracerProvider
    meter_provider: MeterProvider
    _servers: list[Any] = field(default_factory=list)

    def shutdown(self) -> None:
        """Flush exporters and stop the scrape endpoint."""
        for server in self._servers:
            server.shutdown()
        self.meter_provider.shutdown()
        self.tracer_provider.shutdown()


def create_telemetry(
    service_name: str,
    prometheus_port: int = 0,
    prometheus_host: str = "0.0.0.0",
    extra_readers: tuple[MetricReader, ...] = (),
    set_global: bool = False,
) -> Telemetry:
    """Build providers for ``service_name``; optionally make them the process globals."""
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", service_name)})
    tracer_provider = TracerProvider(resource=resource)
    readers: list[MetricReader] = list(extra_readers)
    servers: list[Any] = []
    otlp = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    if otlp:
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        readers.append(PeriodicExportingMetricReader(OTLPMetricExporter()))
        log.info("exporting traces and metrics with OTLP", extra={"endpoint": otlp})
    if prometheus_port:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from prometheus_client import start_http_server

        readers.append(PrometheusMetricReader())
        server, _thread = start_http_server(prometheus_port, prometheus_host)
        servers.append(server)
        log.info("serving Prometheus metrics", extra={"port": prometheus_port, "path": "/metrics"})
    meter_provider = MeterProvider(resource=resource, metric_readers=readers)
    if set_global:
        trace.set_tracer_provider(tracer_provider)
        metrics.set_meter_provider(meter_provider)
    return Telemetry(tracer_provider, meter_provider, servers)
