"""Subscriber metrics (OpenTelemetry; the Prometheus names carry the unit).

Exported as: ``headwater_subscriber_records_total{group,topic,result}`` (result: handled,
duplicate, parked), ``headwater_subscriber_retries_total{group,topic,error_class}``,
``headwater_subscriber_handler_duration_seconds{group,topic}`` and
``headwater_subscriber_consumer_lag_records{group,topic,partition}`` (records between the
next one to handle and the partition's high watermark).
"""

from __future__ import annotations

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Meter, Observation

from headwater.runtime.telemetry import SECONDS_BUCKETS

#: The results a record can end with; every record counts once in exactly one.
RESULTS = ("handled", "duplicate", "parked")


class SubscriberMetrics:
    """Instruments of one subscriber; lag is read at collection time."""

    def __init__(self, group_id: str, meter: Meter | None = None) -> None:
        meter = meter or metrics.get_meter("headwater.subscriber")
        self._group = group_id
        self._records = meter.create_counter(
            "headwater.subscriber.records", unit="{record}", description="Records done, by result"
        )
        self._retries = meter.create_counter(
            "headwater.subscriber.retries",
            unit="{call}",
            description="Failed handler calls that are tried again, by error class",
        )
        self._duration = meter.create_histogram(
            "headwater.subscriber.handler.duration",
            unit="s",
            description="One handler call, successful or not",
            explicit_bucket_boundaries_advisory=SECONDS_BUCKETS,
        )
        meter.create_observable_gauge(
            "headwater.subscriber.consumer.lag",
            [self._observe_lag],
            "records",
            "Records between the next one to handle and the high watermark, per partition",
        )
        #: Lag per (topic, partition); the subscriber updates it after each batch.
        self.lag: dict[tuple[str, int], int] = {}
        #: Records done so far by result, for logs and tests.
        self.counts: dict[str, int] = dict.fromkeys(RESULTS, 0)

    def done(self, topic: str, result: str) -> None:
        """Count one record done with ``result`` (handled, duplicate or parked)."""
        self.counts[result] += 1
        self._records.add(1, {"group": self._group, "topic": topic, "result": result})

    def retried(self, topic: str, error_class: str) -> None:
        """Count one failed handler call that will be tried again."""
        self._retries.add(1, {"group": self._group, "topic": topic, "error_class": error_class})

    def handler_call(self, topic: str, seconds: float) -> None:
        """Record how long one handler call took."""
        self._duration.record(seconds, {"group": self._group, "topic": topic})

    def _observe_lag(self, _options: CallbackOptions) -> list[Observation]:
        return [
            Observation(lag, {"group": self._group, "topic": topic, "partition": partition})
            for (topic, partition), lag in list(self.lag.items())
        ]
