"""The stream sink of "headwater-kafka": Arrow batches produced with acks=all.

Columns: ``topic``, ``key``, ``value``, ``headers`` (as Spark's Kafka sink), and optionally
``role``, ``ref``, ``event_id``, ``label``, ``received_ms``, ``batch_ms`` for the enricher's
two-phase write: every record that is not a completion is produced and flushed first; only
then are the completions built, with the partition and offset the broker gave each event
of the same ``ref``, and produced. Any delivery error fails the task so Spark retries it.
"""

from __future__ import annotations

import json
import time
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from confluent_kafka import KafkaError, Producer
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from headwater.enricher.errors import KafkaDeliveryError
from headwater.enricher.kafka_source import client_config

_PRODUCERS: dict[tuple[tuple[str, str], ...], Producer] = {}
#: The counts key of the bytes written (keys and values).
BYTES = "bytes"
#: Latency samples kept per task and name; enough for p99 without shipping every value.
MAX_SAMPLES = 2000


def _producer(options: Mapping[str, str]) -> Producer:
    """Return this worker's producer for ``options``; Python workers are reused by Spark."""
    conf = client_config(options) | {"acks": "all"}
    conf.setdefault("linger.ms", "5")
    key = tuple(sorted((k, str(v)) for k, v in conf.items()))
    if key not in _PRODUCERS:
        _PRODUCERS[key] = Producer(conf)
    return _PRODUCERS[key]


@dataclass
class SinkReport(WriterCommitMessage):
    """What one task wrote: counts by role/label and latency samples (for metrics)."""

    counts: Counter[str] = field(default_factory=Counter)
    latency_ms: dict[str, list[float]] = field(default_factory=dict)

    def sample(self, name: str, value_ms: float) -> None:
        """Keep one latency sample (the first MAX_SAMPLES per name)."""
        samples = self.latency_ms.setdefault(name, [])
        if len(samples) < MAX_SAMPLES:
            samples.append(round(value_ms, 1))


class _Deliveries:
    """Collects delivery reports; events keep their coordinates for the completions."""

    def __init__(self) -> None:
        self.failures = 0
        self.first_error = ""
        self.coords: dict[int, tuple[str, int, int]] = {}

    def callback(self, index: int | None) -> Any:
        def on_delivery(err: KafkaError | None, msg: Any) -> None:
            if err is not None:
                self.failures += 1
                self.first_error = self.first_error or str(err)
            elif index is not None:
                self.coords[index] = (msg.topic(), msg.partition(), msg.offset())

        return on_delivery


def _produce(producer: Producer, topic: str, key: Any, value: Any, headers: Any, cb: Any) -> None:
    while True:
        try:
            producer.produce(topic, value=value, key=key, headers=headers, on_delivery=cb)
            return
        except BufferError:
            producer.poll(0.05)  # the local queue is full: let deliveries drain


def _flush(producer: Producer, d: _Deliveries, timeout_s: float) -> None:
    left = producer.flush(timeout_s)
    if left:
        raise KafkaDeliveryError(left, f"{left} record(s) still in flight after {timeout_s}s")
    if d.failures:
        raise KafkaDeliveryError(d.failures, d.first_error)


class KafkaStreamWriter(DataSourceStreamArrowWriter):
    """Writes each task's rows to Kafka and returns only after the broker acknowledged all."""

    def __init__(self, options: Mapping[str, str]) -> None:
        # Spark hands options over case-insensitively; keep one spelling: lower case.
        self.options = {k.lower(): v for k, v in options.items()}

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkReport:
        """Produce, flush, then build and produce the completions; raise on any failure."""
        from headwater.enricher.route import with_event_refs

        producer = _producer(self.options)
        timeout_s = float(self.options.get("flushtimeoutseconds", "60"))
        report = SinkReport()
        d = _Deliveries()
        refs: dict[str, list[tuple[str, int]]] = defaultdict(list)
        completions: list[dict[str, Any]] = []
        index = 0
        for batch in iterator:
            cols = batch.to_pydict()
            n = batch.num_rows
            roles = cols.get("role") or ["record"] * n
            for i in range(n):
                role = roles[i]
                label = cols["label"][i] if "label" in cols else None
                report.counts[f"{role}:{label}" if label else role] += 1
                headers = [(h["key"], h["value"]) for h in cols["headers"][i] or []]
                if role == "completion":
                    completions.append({k: cols[k][i] for k in cols} | {"headers": headers})
                    continue
                is_event = role == "event"
                if is_event:
                    refs[cols["ref"][i]].append((cols["event_id"][i], index))
                cb = d.callback(index if is_event else None)
                _produce(producer, cols["topic"][i], cols["key"][i], cols["value"][i], headers, cb)
                report.counts[BYTES] += len(cols["value"][i] or b"") + len(cols["key"][i] or b"")
                index += 1
        _flush(producer, d, timeout_s)
        if completions:
            batch_ms = completions[0].get("batch_ms") or 0
            acked_ms = time.time() * 1000
            for c in completions:
                mine = refs.get(c["ref"], []) if c.get("label") == "ENRICHED" else []
                coords = [(eid, *d.coords[i]) for eid, i in mine]
                value = with_event_refs(c["value"], coords)
                _produce(producer, c["topic"], c["key"], value, c["headers"], d.callback(None))
                report.counts[BYTES] += len(value) + len(c["key"] or b"")
                if c.get("received_ms"):
                    report.sample("ingest_to_read", batch_ms - c["received_ms"])
                    report.sample("read_to_ack", acked_ms - batch_ms)
                    report.sample("ingest_to_ack", acked_ms - c["received_ms"])
            _flush(producer, d, timeout_s)
        return report

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Append the batch's counts to ``statsPath`` (read by the job's metrics listener)."""
        path = self.options.get("statspath")
        if not path:
            return
        counts: Counter[str] = Counter()
        hist: dict[str, list[float]] = {}
        for m in messages:
            if isinstance(m, SinkReport):
                counts.update(m.counts)
                for name, samples in m.latency_ms.items():
                    hist.setdefault(name, []).extend(samples)
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps({"batch_id": batchId, "counts": counts, "latency_ms": hist}))
            out.write("\n")

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to undo: records already acknowledged stay (at-least-once, stable ids)."""
