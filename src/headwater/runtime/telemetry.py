"""OpenTelemetry for Headwater processes: resource, traces and metrics, chosen by ``OTEL_*``.

What the standard variables do here (the SDK reads most of them itself):

- ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES`` override the resource this module
  builds (``service.name``, ``service.version``, ``service.instance.id`` and the
  ``k8s.*`` attributes from the downward-API variables ``POD_NAME``, ``POD_NAMESPACE``,
  ``NODE_NAME`` the chart sets).
- ``OTEL_TRACES_EXPORTER`` / ``OTEL_METRICS_EXPORTER``: comma-separated ``otlp``,
  ``console``, ``prometheus`` (metrics), ``none``. Unset, OTLP is used when an OTLP endpoint
  is configured (``OTEL_EXPORTER_OTLP_ENDPOINT`` or the per-signal one) and nothing
  otherwise, so a process without a collector does not try to reach one; metrics are
  always scraped from the process's Prometheus port when it has one, unless
  ``OTEL_METRICS_EXPORTER`` is set and leaves ``prometheus`` out.
- ``OTEL_EXPORTER_OTLP_PROTOCOL`` (and the per-signal ``..._TRACES_PROTOCOL``,
  ``..._METRICS_PROTOCOL``): ``grpc`` (default) or ``http/protobuf`` when its exporter
  package is installed; anything else is a :class:`TelemetryConfigError` naming the
  variable. Endpoint, headers, certificates and timeouts are read by the exporters.
- ``OTEL_TRACES_SAMPLER`` / ``OTEL_TRACES_SAMPLER_ARG``: read by the SDK's
  ``TracerProvider``; an unknown sampler name is refused here instead of silently sampling
  everything. Unset, the SDK's default is ``parentbased_always_on``; a process may choose
  ``parentbased_traceidratio`` instead (``create_telemetry(trace_ratio=...)``, the ingest
  service does), with ``OTEL_TRACES_SAMPLER_ARG`` as the ratio when it is set. Either way a
  caller's sampled ``traceparent`` is followed.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, entry_points, version
from typing import Any, Literal

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import OTELResourceDetector, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ParentBased, Sampler, TraceIdRatioBased

from headwater.errors import HeadwaterError

log = logging.getLogger(__name__)

#: Histogram buckets for durations in seconds, from 1 ms to 30 s.
SECONDS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)

#: Downward-API variables the chart sets -> the resource attributes they become.
K8S_ENV = {
    "POD_NAME": "k8s.pod.name",
    "POD_NAMESPACE": "k8s.namespace.name",
    "NODE_NAME": "k8s.node.name",
}

#: ``OTEL_EXPORTER_OTLP_PROTOCOL`` values -> the exporter entry point that speaks them.
_OTLP_ENTRY_POINTS = {"grpc": "otlp_proto_grpc", "http/protobuf": "otlp_proto_http"}
#: The package that provides each OTLP entry point, for the error when it is missing.
_OTLP_PACKAGES = {
    "otlp_proto_grpc": "opentelemetry-exporter-otlp-proto-grpc",
    "otlp_proto_http": "opentelemetry-exporter-otlp-proto-http",
}

Signal = Literal["traces", "metrics"]


class TelemetryConfigError(HeadwaterError, ValueError):
    """An ``OTEL_*`` setting this process cannot honour; the message names the variable."""


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


def headwater_version() -> str:
    """Return the installed package's version (``0+unknown`` from a bare source tree)."""
    try:
        return version("headwater")
    except PackageNotFoundError:
        return "0+unknown"


def instance_id(env: Mapping[str, str]) -> str:
    """Return ``service.instance.id``: the pod name, else ``<host>-<pid>``.

    A pod runs one Headwater process, and its name is what operators search for; outside
    Kubernetes several processes share a host, so the pid tells them apart.
    """
    pod = env.get("POD_NAME", "").strip()
    return pod or f"{socket.gethostname()}-{os.getpid()}"


def build_resource(service_name: str) -> Resource:
    """Return the process's resource; ``OTEL_SERVICE_NAME``/``OTEL_RESOURCE_ATTRIBUTES`` win.

    Headwater's values are the defaults and the SDK's own environment detector is merged
    over them, so an operator can override any attribute the standard way.
    """
    attributes: dict[str, str] = {
        "service.name": service_name,
        "service.version": headwater_version(),
        "service.instance.id": instance_id(os.environ),
    }
    for variable, attribute in K8S_ENV.items():
        value = os.environ.get(variable, "").strip()
        if value:
            attributes[attribute] = value
    return Resource.create(attributes).merge(OTELResourceDetector().detect())


def exporter_names(signal: Signal, env: Mapping[str, str] | None = None) -> list[str]:
    """Return the exporters asked for one signal (``OTEL_<SIGNAL>_EXPORTER`` or the default)."""
    env = os.environ if env is None else env
    variable = f"OTEL_{signal.upper()}_EXPORTER"
    raw = env.get(variable)
    if raw is None or not raw.strip():
        endpoint = env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get(
            f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT"
        )
        names = ["otlp"] if endpoint else []
        # The process's own scrape port is the documented default for metrics.
        return [*names, "prometheus"] if signal == "metrics" else names
    names = [n.strip().lower() for n in raw.split(",") if n.strip()]
    if "none" in names:
        return []
    allowed = {"otlp", "console"} | ({"prometheus"} if signal == "metrics" else set())
    unknown = [n for n in names if n not in allowed]
    if unknown:
        raise TelemetryConfigError(
            f"{variable}={raw!r}: unknown exporter {unknown[0]!r}; use "
            f"{', '.join(sorted(allowed))} or none"
        )
    return names


def otlp_entry_point(signal: Signal, env: Mapping[str, str] | None = None) -> str:
    """Return the entry point of the OTLP exporter for ``signal``'s configured protocol."""
    env = os.environ if env is None else env
    variable = f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL"
    protocol = env.get(variable, "").strip()
    if not protocol:
        variable = "OTEL_EXPORTER_OTLP_PROTOCOL"
        protocol = env.get(variable, "").strip() or "grpc"
    name = _OTLP_ENTRY_POINTS.get(protocol)
    if name is None:
        raise TelemetryConfigError(
            f"{variable}={protocol!r} is not supported; use grpc or http/protobuf"
        )
    if not entry_points(group=f"opentelemetry_{signal}_exporter", name=name):
        raise TelemetryConfigError(
            f"{variable}={protocol} needs the package {_OTLP_PACKAGES[name]}, which is not "
            f"installed; install it or use {variable}=grpc"
        )
    return name


def _load_exporter(signal: Signal, name: str, env: Mapping[str, str]) -> Any:
    """Load an exporter class through the SDK's entry points (as ``opentelemetry-instrument``)."""
    if name == "otlp":
        name = otlp_entry_point(signal, env)
    (entry_point,) = entry_points(group=f"opentelemetry_{signal}_exporter", name=name)
    return entry_point.load()


def check_sampler(env: Mapping[str, str] | None = None) -> None:
    """Refuse an ``OTEL_TRACES_SAMPLER`` the SDK does not know (it would sample everything)."""
    env = os.environ if env is None else env
    name = env.get("OTEL_TRACES_SAMPLER", "").strip().lower()
    if name and not entry_points(group="opentelemetry_traces_sampler", name=name):
        known = sorted(ep.name for ep in entry_points(group="opentelemetry_traces_sampler"))
        raise TelemetryConfigError(f"OTEL_TRACES_SAMPLER={name!r} is unknown; use one of {known}")


def default_sampler(
    trace_ratio: float | None, env: Mapping[str, str] | None = None
) -> Sampler | None:
    """The sampler of a process whose operator set no ``OTEL_TRACES_SAMPLER``.

    None (the SDK reads the variables, ``parentbased_always_on`` by default) unless the
    process asks for a ratio: then ``parentbased_traceidratio`` at ``OTEL_TRACES_SAMPLER_ARG``
    if set, else at ``trace_ratio``. Parent-based: a call whose caller sent a sampled
    ``traceparent`` is always traced, one it sent unsampled never; only new traces are
    sampled at the ratio. An unsampled call still has a trace id (logs carry it).

    Raises:
        TelemetryConfigError: ``OTEL_TRACES_SAMPLER_ARG`` is not a ratio from 0 to 1.
    """
    env = os.environ if env is None else env
    if trace_ratio is None or env.get("OTEL_TRACES_SAMPLER", "").strip():
        return None
    raw = env.get("OTEL_TRACES_SAMPLER_ARG", "").strip()
    ratio = trace_ratio
    if raw:
        try:
            ratio = float(raw)
        except ValueError:
            ratio = -1.0
        if not 0.0 <= ratio <= 1.0:
            raise TelemetryConfigError(
                f"OTEL_TRACES_SAMPLER_ARG={raw!r}: the ratio of new traces to sample, 0 to 1"
            )
    return ParentBased(TraceIdRatioBased(ratio))


def create_telemetry(
    service_name: str,
    prometheus_port: int = 0,
    prometheus_host: str = "0.0.0.0",
    extra_readers: tuple[MetricReader, ...] = (),
    set_global: bool = False,
    trace_ratio: float | None = None,
) -> Telemetry:
    """Build providers for ``service_name`` from the ``OTEL_*`` variables; optionally global.

    ``prometheus_port`` is the process's scrape port (``HEADWATER_*_METRICS_PORT``; 0: none).
    ``trace_ratio``: the share of new traces sampled when ``OTEL_TRACES_SAMPLER`` is unset
    (:func:`default_sampler`); None keeps the SDK's default (every trace).
    Raises :class:`TelemetryConfigError` for settings it cannot honour, before starting
    anything.
    """
    env = os.environ
    check_sampler(env)
    sampler = default_sampler(trace_ratio, env)
    trace_names = exporter_names("traces", env)
    metric_names = exporter_names("metrics", env)
    span_exporters = [_load_exporter("traces", n, env) for n in trace_names]
    metric_exporters = [
        _load_exporter("metrics", n, env) for n in metric_names if n != "prometheus"
    ]

    resource = build_resource(service_name)
    # Without a sampler argument the SDK reads OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG.
    tracer_provider = TracerProvider(resource=resource, sampler=sampler)
    for exporter_class in span_exporters:
        tracer_provider.add_span_processor(BatchSpanProcessor(exporter_class()))
    readers: list[MetricReader] = list(extra_readers)
    for exporter_class in metric_exporters:
        # The reader reads OTEL_METRIC_EXPORT_INTERVAL itself.
        readers.append(PeriodicExportingMetricReader(exporter_class()))
    servers: list[Any] = []
    if "prometheus" in metric_names and prometheus_port:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from prometheus_client import start_http_server

        readers.append(PrometheusMetricReader())
        server, _thread = start_http_server(prometheus_port, prometheus_host)
        servers.append(server)
        log.info("serving Prometheus metrics", extra={"port": prometheus_port, "path": "/metrics"})
    elif "prometheus" in metric_names and env.get("OTEL_METRICS_EXPORTER"):
        # Asked for explicitly by a process without a port of its own: the SDK's reader,
        # on OTEL_EXPORTER_PROMETHEUS_HOST/PORT.
        readers.append(_load_exporter("metrics", "prometheus", env)())
    meter_provider = MeterProvider(resource=resource, metric_readers=readers)
    if trace_names or metric_exporters:
        log.info(
            "exporting telemetry",
            extra={"traces": trace_names, "metrics": metric_names, "service": service_name},
        )
    if set_global:
        trace.set_tracer_provider(tracer_provider)
        metrics.set_meter_provider(meter_provider)
    return Telemetry(tracer_provider, meter_provider, servers)
