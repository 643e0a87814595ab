"""Gateway metrics: throughput by outcome, failed calls, and the spool's depth, size, age and drops.

Names carry their unit, as the Prometheus exporter shows them:
``headwater_gateway_messages_total{endpoint,outcome}``,
``headwater_gateway_delivered_bytes_total{endpoint}``,
``headwater_gateway_failed_calls_total{endpoint,code}``,
``headwater_gateway_spool_messages``, ``headwater_gateway_spool_size_bytes``,
``headwater_gateway_spool_oldest_age_seconds`` and
``headwater_gateway_spool_dropped_messages_total{reason}``.

The spool instruments are read from the spool at collection time: its counters live in
the spool file, so drops are counted even while no sender runs, and survive restarts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Meter, Observation

from headwater.gateway.records import DROP_REASONS
from headwater.gateway.spool import Spool


class GatewayMetrics:
    """Instruments of one gateway client (one spool)."""

    def __init__(self, spool: Spool, meter: Meter | None = None) -> None:
        meter = meter or metrics.get_meter("headwater.gateway")
        self._spool = spool
        self._messages = meter.create_counter(
            "headwater.gateway.messages",
            unit="{message}",
            description="Messages answered by the ingest service, by outcome "
            "(delivered, retry, rejected): the gateway's throughput",
        )
        self._delivered_bytes = meter.create_counter(
            "headwater.gateway.delivered",
            unit="By",
            description="Envelope bytes delivered (answered OK)",
        )
        self._failed_calls = meter.create_counter(
            "headwater.gateway.failed_calls",
            unit="{call}",
            description="Calls and streams that failed as a whole (their messages stay spooled)",
        )
        meter.create_observable_gauge(
            "headwater.gateway.spool.messages",
            [self._spool_gauge("depth")],
            "{message}",
            "Messages waiting in the spool",
        )
        meter.create_observable_gauge(
            "headwater.gateway.spool.size",
            [self._spool_gauge("bytes")],
            "By",
            "Envelope bytes waiting in the spool, against SpoolLimits.max_bytes",
        )
        meter.create_observable_gauge(
            "headwater.gateway.spool.oldest_age",
            [self._spool_gauge("oldest_age_s")],
            "s",
            "Age of the oldest spooled message: how long the link or the cloud has been behind",
        )
        meter.create_observable_counter(
            "headwater.gateway.spool.dropped_messages",
            [self._dropped],
            "{message}",
            "Messages lost on purpose by the spool's limits, by reason "
            "(dropped_oldest, expired, refused)",
        )

    def _spool_gauge(self, field: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe(_options: CallbackOptions) -> Iterable[Observation]:
            if self._spool.closed:  # instruments outlive a closed spool; report nothing
                return []
            return [Observation(getattr(self._spool.stats(), field))]

        return observe

    def _dropped(self, _options: CallbackOptions) -> Iterable[Observation]:
        if self._spool.closed:
            return []
        counters = self._spool.stats().counters
        return [Observation(counters.get(r, 0), {"reason": r}) for r in DROP_REASONS]

    def message(self, endpoint: str, outcome: str, n: int = 1) -> None:
        """Count ``n`` messages' outcome: delivered, retry or rejected."""
        self._messages.add(n, {"endpoint": endpoint, "outcome": outcome})

    def delivered_bytes(self, endpoint: str, size: int) -> None:
        """Count envelope bytes answered OK."""
        if size:
            self._delivered_bytes.add(size, {"endpoint": endpoint})

    def call_failed(self, endpoint: str, code: str) -> None:
        """Count one call or stream that failed as a whole."""
        self._failed_calls.add(1, {"endpoint": endpoint, "code": code})
