"""Metrics of the enricher: a StreamingQueryListener exporting with OpenTelemetry.

Spark's progress gives rows read, batch duration and offsets (lag); the sink appends what
it wrote per batch (counts by role and reason, bytes, latency samples) to a stats file that
this listener reads, because the sink's commit runs in a different Python process on the
driver. The dedup ids the bounds forgot are the JVM operator's accumulator, read on the
driver after each micro-batch (``jvm_state.ids_forgotten``); like every counter here it starts
at 0 in a new driver process, which Prometheus' ``rate()`` and ``increase()`` take as a reset.

Counters and histograms only (and the lag, a gauge of records waiting): rates and
quantiles are computed by PromQL or by ``headwater lag`` from two scrapes, never
precomputed here. Prometheus names: headwater_enricher_input_records_total,
headwater_enricher_batch_duration_seconds, headwater_enricher_records_written_total,
headwater_enricher_output_bytes_total, headwater_enricher_dead_letters_total,
headwater_enricher_retries_total, headwater_enricher_normalize_budget_exceeded_total,
headwater_enricher_dedup_ids_forgotten_total, headwater_enricher_consumer_lag_records and
headwater_enricher_{producer_to_consumer,consumer_to_processing,end_to_end}_duration_seconds.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable
from typing import Any

from opentelemetry.metrics import CallbackOptions, Meter, Observation
from pyspark.sql.streaming import StreamingQueryListener

from headwater.enricher.hop.budget import REASONS as BUDGET_REASONS
from headwater.enricher.sink.kafka_sink import BYTES
from headwater.runtime import stats
from headwater.runtime.telemetry import SECONDS_BUCKETS


def lag_by_topic(source: dict[str, Any]) -> dict[str, int]:
    """Return records not yet read per topic, from one source's progress entry.

    Offsets that are not the Kafka source's JSON (``{topic: {partition: offset}}``) give
    no lag: a listener that raised here would leave every later batch's lag unrecorded.
    """
    end = _kafka_offsets(source.get("endOffset"))
    latest = _kafka_offsets(source.get("latestOffset"))
    lag: dict[str, int] = {}
    for topic, parts in latest.items():
        done = end.get(topic, {})
        lag[topic] = sum(max(0, int(o) - int(done.get(p, 0))) for p, o in parts.items())
    return lag


def _kafka_offsets(text: str | None) -> dict[str, dict[str, int]]:
    try:
        offsets = json.loads(text or "{}")
    except ValueError:
        return {}
    if not isinstance(offsets, dict):
        return {}
    return {t: parts for t, parts in offsets.items() if isinstance(parts, dict)}


def percentile(values: list[float], q: float) -> float:
    """Return the ``q`` quantile (0..1) of ``values``, 0 when empty (``runtime.stats``' rule)."""
    found = stats.quantile(values, q)
    return 0.0 if found is None else found


#: Sample name (from the sink) -> what it measures.
_LATENCIES = {
    "producer_to_consumer": "ingest received-at to the micro-batch that read it",
    "consumer_to_processing": "micro-batch read to completion acknowledged by the broker",
    "end_to_end": "ingest received-at to completion acknowledged by the broker",
}
#: The sink's sample names, mapped to the metric names.
_SAMPLE_NAMES = {
    "ingest_to_read": "producer_to_consumer",
    "read_to_ack": "consumer_to_processing",
    "ingest_to_ack": "end_to_end",
}


class EnricherListener(StreamingQueryListener):
    """Turns query progress and sink stats into OpenTelemetry metrics and a run summary.

    ``ids_forgotten`` reads the running total of dedup ids the bounds forgot
    (``jvm_state.ids_forgotten``); the counter adds what it grew by since the listener was
    made. Without it (no Spark, as in the scrape checks) the counter stays at 0.
    """

    def __init__(
        self, meter: Meter, stats_path: str, ids_forgotten: Callable[[], int] = lambda: 0
    ) -> None:
        self.stats_path = stats_path
        self._ids_forgotten = ids_forgotten
        self._forgotten_so_far = ids_forgotten()
        self._stats_pos = 0
        self.batches = 0
        self.input_rows = 0
        self.counts: Counter[str] = Counter()
        self.samples: dict[str, list[float]] = {}
        self._lag: dict[str, int] = {}
        m = "headwater.enricher."
        self._input = meter.create_counter(
            m + "input.records", unit="{record}", description="records read"
        )
        self._duration = meter.create_histogram(
            m + "batch.duration",
            unit="s",
            description="micro-batch duration",
            explicit_bucket_boundaries_advisory=SECONDS_BUCKETS,
        )
        self._written = meter.create_counter(
            m + "records.written",
            unit="{record}",
            description="records acknowledged by the broker, by role",
        )
        self._output = meter.create_counter(
            m + "output",
            unit="By",
            description="key and value bytes acknowledged by the broker",
        )
        self._dead = meter.create_counter(
            m + "dead_letters", unit="{record}", description="dead letters by reason"
        )
        self._budget = meter.create_counter(
            m + "normalize.budget_exceeded",
            unit="{record}",
            description="dead letters over the normalize budget or the Sparkplug caps, by reason",
        )
        self._retries = meter.create_counter(
            m + "retries", unit="{record}", description="parked retries by reason"
        )
        self._forgotten = meter.create_counter(
            m + "dedup.ids_forgotten",
            unit="{id}",
            description="dedup ids the per-device bounds forgot (a resend is enriched again)",
        )
        self._forgotten.add(0)  # exported from the start: an operator sees 0, not nothing
        # Histograms over every sample: quantiles are PromQL's histogram_quantile().
        self._latency = {
            name: meter.create_histogram(
                f"{m}{name}.duration",
                unit="s",
                description=desc,
                explicit_bucket_boundaries_advisory=SECONDS_BUCKETS,
            )
            for name, desc in _LATENCIES.items()
        }
        meter.create_observable_gauge(
            m + "consumer.lag",
            [self._observe_lag],
            "records",
            "records not yet read per topic (the source's latest offsets minus its position)",
        )

    def _observe_lag(self, _options: CallbackOptions) -> list[Observation]:
        return [Observation(v, {"topic": t}) for t, v in self._lag.items()]

    def onQueryStarted(self, event: Any) -> None:
        """Nothing to record."""

    def onQueryIdle(self, event: Any) -> None:
        """Nothing to record."""

    def onQueryProgress(self, event: Any) -> None:
        """Record one micro-batch."""
        p = event.progress
        self.batches += 1
        self.input_rows += p.numInputRows
        self._input.add(p.numInputRows)
        self._duration.record((p.batchDuration or 0) / 1000.0)
        lag: dict[str, int] = {}
        for s in p.sources:
            lag |= lag_by_topic({"endOffset": s.endOffset, "latestOffset": s.latestOffset})
        self._lag = lag
        self.read_stats()
        self.read_ids_forgotten()

    def onQueryTerminated(self, event: Any) -> None:
        """Pick up the last batch's stats."""
        self.read_stats()

    def read_stats(self) -> int:
        """Fold new lines of the sink's stats file into the metrics; return bytes written."""
        if not os.path.exists(self.stats_path):
            return 0
        with open(self.stats_path, encoding="utf-8") as f:
            f.seek(self._stats_pos)
            lines = f.readlines()
            self._stats_pos = f.tell()
        written = 0
        for line in lines:
            if not line.endswith("\n"):
                self._stats_pos -= len(line.encode())
                break
            entry = json.loads(line)
            for key, n in entry["counts"].items():
                if key == BYTES:
                    written += n
                    self._output.add(n)
                    continue
                self.counts[key] += n
                role, _, label = key.partition(":")
                self._written.add(n, {"role": role})
                if role == "deadletter":
                    self._dead.add(n, {"reason": label})
                    if label in BUDGET_REASONS:
                        self._budget.add(n, {"reason": label})
                elif role == "retry":
                    self._retries.add(n, {"reason": label})
            for sample, values in entry["latency_ms"].items():
                name = _SAMPLE_NAMES.get(sample)
                if name is None:
                    continue
                self.samples.setdefault(sample, []).extend(values)
                for v in values:
                    self._latency[name].record(max(0.0, v / 1000.0))
        return written

    def read_ids_forgotten(self) -> None:
        """Add the dedup ids forgotten since the last read (the accumulator only grows)."""
        total = self._ids_forgotten()
        self._forgotten.add(total - self._forgotten_so_far)
        self._forgotten_so_far = total

    def summary(self) -> dict[str, Any]:
        """Return the run summary printed by ``headwater enricher run``."""

        def by(role: str) -> dict[str, int]:
            return {
                k.partition(":")[2]: n
                for k, n in sorted(self.counts.items())
                if k.startswith(role + ":")
            }

        latency = {
            name: {"p50": percentile(v, 0.5), "p99": percentile(v, 0.99), "samples": len(v)}
            for name, v in sorted(self.samples.items())
        }
        return {
            "batches": self.batches,
            "input_rows": self.input_rows,
            "events": sum(by("event").values()),
            "events_by_type": by("event"),
            "completions": by("completion"),
            "dead_letters": by("deadletter"),
            "retries": by("retry"),
            "state_snapshots": sum(by("state").values()),
            "latency_ms": latency,
        }
