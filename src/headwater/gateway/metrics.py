"""Gateway metrics: messages by outcome, failed calls, and the spool's depth, size and age.

Exported names (Prometheus): headwater_gateway_messages_total{endpoint,outcome},
headwater_gateway_failed_calls_total{endpoint,code}, headwater_gateway_spool_depth_messages,
headwater_gateway_spool_size_bytes, headwater_gateway_spool_oldest_age_seconds.
"""

from __future__ import annotations

from collections.abc import Callable

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Meter, Observation

from headwater.gateway.spool import Spool


class GatewayMetrics:
    """Instruments of one gateway client; spool gauges are read at collection time."""

    def __init__(self, spool: Spool, meter: Meter | None = None) -> None:
        meter = meter or metrics.get_meter("headwater.gateway")
        self._messages = meter.create_counter(
            "headwater.gateway.messages", unit="{message}", description="Messages by outcome"
        )
        self._failed_calls = meter.create_counter(
            "headwater.gateway.failed_calls", unit="{call}", description="Calls failed as a whole"
        )
        self._spool = spool

        def gauge(read: str) -> Callable[[CallbackOptions], list[Observation]]:
            def cb(_options: CallbackOptions) -> list[Observation]:
                stats = self._spool.stats()
                return [Observation(getattr(stats, read))]

            return cb

        meter.create_observable_gauge(
            "headwater.gateway.spool.depth", [gauge("depth")], "{message}", "Messages spooled"
        )
        meter.create_observable_gauge(
            "headwater.gateway.spool.size", [gauge("bytes")], "By", "Bytes spooled"
        )
        meter.create_observable_gauge(
            "headwater.gateway.spool.oldest_age",
            [gauge("oldest_age_s")],
            "s",
            "Age of the oldest spooled message",
        )

    def message(self, endpoint: str, outcome: str) -> None:
        """Count one message's outcome: delivered, retry or rejected."""
        self._messages.add(1, {"endpoint": endpoint, "outcome": outcome})

    def call_failed(self, endpoint: str, code: str) -> None:
        """Count one call or stream that failed as a whole."""
        self._failed_calls.add(1, {"endpoint": endpoint, "code": code})
