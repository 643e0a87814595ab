"""The metrics of the ingest service; names carry their unit (Prometheus adds suffixes).

Exported names (Prometheus): headwater_ingest_requests_total, headwater_ingest_messages_total,
headwater_ingest_received_bytes_total, headwater_ingest_frame_duration_seconds,
headwater_ingest_produce_duration_seconds, headwater_ingest_inflight_bytes,
headwater_ingest_inflight_requests, headwater_ingest_refused_calls_total,
headwater_ingest_refused_bytes_total, headwater_ingest_open_streams,
headwater_ingest_gateway_inflight_bytes, and the OpenTelemetry RPC convention's
rpc_server_call_duration_seconds (``rpc.server.call.duration``, in seconds: the current
name; ``rpc.server.duration`` in ms is deprecated in the installed semantic conventions).
Counters and histograms only, besides gauges of what is held right now: rates and
quantiles are PromQL's job.

A publish call's latency is recorded once, on ``rpc.server.call.duration``; a stream is
one observation there for its whole life, so its frames have their own histogram
(``headwater.ingest.frame.duration``). Until this release a second histogram,
``headwater.ingest.request.duration``, recorded every publish call again.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping

from opentelemetry.metrics import CallbackOptions, Meter, Observation
from opentelemetry.util.types import AttributeValue

from headwater.runtime.conventions import rpc_metric_attributes
from headwater.runtime.telemetry import SECONDS_BUCKETS


class Tally:
    """A counter kept as plain integers per attribute set, exported at collection time.

    What the SDK's synchronous counter does per ``add`` (a measurement object, exemplar
    sampling, a lock per aggregation) cost more than a small call's own work (measured:
    docs/benchmarks.md); here an ``add`` is one dict update on the event loop, and the
    observable counter of the same name reads the totals when scraped or exported.
    """

    def __init__(self, meter: Meter, name: str, unit: str, description: str) -> None:
        self._totals: dict[tuple[tuple[str, str], ...], int] = {}
        meter.create_observable_counter(
            name, callbacks=[self._observe], unit=unit, description=description
        )

    def add(self, amount: int, attributes: Mapping[str, str]) -> None:
        """Add ``amount`` to the total of ``attributes``."""
        key = tuple(attributes.items())
        self._totals[key] = self._totals.get(key, 0) + amount

    def _observe(self, _options: CallbackOptions) -> list[Observation]:
        # dict() copies in one step under the GIL: the loop may add a key meanwhile.
        return [Observation(total, dict(key)) for key, total in dict(self._totals).items()]


class IngestMetrics:
    """Instruments recorded by the servicer, once per call (not per message)."""

    def __init__(self, meter: Meter) -> None:
        self.requests = Tally(
            meter, "headwater.ingest.requests", "{request}", "RPCs by endpoint and code"
        )
        self.messages = Tally(
            meter,
            "headwater.ingest.messages",
            "{message}",
            "Device messages by endpoint and per-message code",
        )
        self.received_bytes = Tally(
            meter,
            "headwater.ingest.received",
            "By",
            "Device message bytes by endpoint and per-message code",
        )
        self.frame_duration = meter.create_histogram(
            "headwater.ingest.frame.duration",
            unit="s",
            description="Time from reading a stream frame to answering it",
            explicit_bucket_boundaries_advisory=SECONDS_BUCKETS,
        )
        self.produce_duration = meter.create_histogram(
            "headwater.ingest.produce.duration",
            unit="s",
            description="Time from handing a batch to the producer to the last broker ack",
            explicit_bucket_boundaries_advisory=SECONDS_BUCKETS,
        )
        self.refused_calls = Tally(
            meter,
            "headwater.ingest.refused.calls",
            "{call}",
            "Calls and stream frames refused unstarted (RESOURCE_EXHAUSTED), by "
            "gateway and the limit that refused them",
        )
        self.refused_bytes = Tally(
            meter,
            "headwater.ingest.refused",
            "By",
            "Request bytes refused unstarted, by gateway and limit",
        )
        self.rpc_call_duration = meter.create_histogram(
            "rpc.server.call.duration",
            unit="s",
            description="Duration of an incoming RPC (a whole stream for streaming methods)",
            explicit_bucket_boundaries_advisory=SECONDS_BUCKETS,
        )
        self._meter = meter

    def rpc_call(self, service: str, method: str, code_name: str, seconds: float) -> None:
        """Record one finished RPC under the OpenTelemetry RPC conventions."""
        self.rpc_call_duration.record(seconds, _rpc_attributes(service, method, code_name))

    def observe_inflight(self, read: Callable[[], tuple[int, int]]) -> None:
        """Export in-flight bytes and requests, read at collection time (free per call)."""
        self._meter.create_observable_gauge(
            "headwater.ingest.inflight",
            callbacks=[lambda _options: [Observation(read()[0])]],
            unit="By",
            description="Request bytes being processed",
        )
        self._meter.create_observable_gauge(
            "headwater.ingest.inflight.requests",
            callbacks=[lambda _options: [Observation(read()[1])]],
            unit="{request}",
            description="Requests and stream frames being processed",
        )

    def observe_admission(
        self, streams: Callable[[], int], by_gateway: Callable[[], dict[str, int]]
    ) -> None:
        """Export open streams and each gateway's in-flight bytes, read at collection time."""
        self._meter.create_observable_gauge(
            "headwater.ingest.open.streams",
            callbacks=[lambda _options: [Observation(streams())]],
            unit="{stream}",
            description="Open IngestService streams, against HEADWATER_INGEST_MAX_STREAMS",
        )
        self._meter.create_observable_gauge(
            "headwater.ingest.gateway.inflight",
            callbacks=[
                lambda _options: [Observation(n, {"gateway": gw}) for gw, n in by_gateway().items()]
            ],
            unit="By",
            description="Request bytes in flight per gateway, against its share",
        )


@functools.lru_cache(maxsize=256)
def _rpc_attributes(service: str, method: str, code_name: str) -> Mapping[str, AttributeValue]:
    """``rpc.server.call.duration``'s attributes, built once per method and code."""
    return rpc_metric_attributes(service, method, code_name)
