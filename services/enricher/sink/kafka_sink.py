"""The enricher's stream sink, "headwater-kafka": Arrow batches produced with acks=all.

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
from typing import Any, NamedTuple

import pyarrow as pa
from confluent_kafka import KafkaError, Producer
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamArrowWriter,
    DataSourceStreamWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from headwater.enricher.errors import KafkaDeliveryError
from headwater.enricher.hop import worker_gc
from headwater.enricher.sink import unproducible
from headwater.proto.events.v1 import completion_pb2

#: Not "kafka": Spark's built-in Kafka sink would win over a Python one of the same name.
SINK_NAME = "headwater-kafka"
_PRODUCERS: dict[tuple[tuple[str, str], ...], Producer] = {}
#: The counts key of the bytes written (keys and values).
BYTES = "bytes"
#: The sink's producer lingers at least this long (ms): it flushes at the end of each phase.
SINK_LINGER_MS = 100
#: Latency samples kept per task and name; enough for p99 without shipping every value.
MAX_SAMPLES = 2000


def client_config(options: Mapping[str, str]) -> dict[str, Any]:
    """Return librdkafka settings from the ``kafka.*`` options (as Spark's sink takes them)."""
    return {k[len("kafka.") :]: v for k, v in options.items() if k.startswith("kafka.")}


def _producer(options: Mapping[str, str]) -> Producer:
    """Return this worker's producer for ``options``; Python workers are reused by Spark."""
    conf = client_config(options) | {"acks": "all"}
    # Each phase of a task ends in flush(), which sends at once whatever linger.ms says, so
    # here linger only decides how many records share a produce request. The shared 5 ms
    # cut a task's events into many small requests: 4,000 records flushed in 83 ms at 5 ms,
    # in 11-16 ms at 100 ms (embedded broker), and the broker handles fewer requests.
    conf["linger.ms"] = str(max(int(conf.get("linger.ms", 0)), SINK_LINGER_MS))
    key = tuple(sorted((k, str(v)) for k, v in conf.items()))
    if key not in _PRODUCERS:
        _PRODUCERS[key] = Producer(conf)
    return _PRODUCERS[key]


@dataclass
class SinkReport(WriterCommitMessage):
    """What one task wrote: counts by role/label and latency samples (for metrics)."""

    counts: Counter[str] = field(default_factory=Counter)
    latency_ms: dict[str, list[float]] = field(default_factory=dict)
    #: Where the task's time went: producing records, waiting for acks (the benchmark).
    timing_ms: dict[str, float] = field(default_factory=dict)

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

    def on_other(self, err: KafkaError | None, msg: Any) -> None:
        """Delivery report of a record whose coordinates nobody reads: count failures."""
        if err is not None:
            self.failures += 1
            self.first_error = self.first_error or str(err)

    def callback(self, index: int) -> Any:
        """Return the delivery report of event ``index``: keeps its coordinates."""

        def on_delivery(err: KafkaError | None, msg: Any) -> None:
            if err is not None:
                self.on_other(err, msg)
            else:
                self.coords[index] = (msg.topic(), msg.partition(), msg.offset())

        return on_delivery


def _produce(
    producer: Producer, topic: str, key: Any, value: Any, headers: Any, cb: Any
) -> Exception | None:
    """Produce one record; return the error when the producer refuses it for good.

    Refusals are data problems (a record over ``message.max.bytes``, a value of the
    wrong type): raising would fail the task, and its replay would fail again and stop
    every device. The caller dead-letters the record instead.
    """
    while True:
        try:
            producer.produce(topic, value=value, key=key, headers=headers, on_delivery=cb)
            return None
        except BufferError:
            producer.poll(0.05)  # the local queue is full: let deliveries drain
        except Exception as exc:  # any refusal of this one record
            return exc


def with_event_refs(value: bytes, refs: list[tuple[str, str, int, int]]) -> bytes:
    """Return completion bytes with ``(event_id, topic, partition, offset)`` refs appended.

    Appended as bytes: a parser merges concatenated encodings of one message, appending
    to its repeated fields, so the completion is not parsed and encoded again (done for
    every message).
    """
    if not refs:
        return value
    extra = completion_pb2.Completion()
    for event_id, topic, partition, offset in refs:
        extra.events.add(event_id=event_id, topic=topic, partition=partition, offset=offset)
    return value + extra.SerializeToString()


def _flush(producer: Producer, d: _Deliveries, timeout_s: float) -> None:
    left = producer.flush(timeout_s)
    if left:
        raise KafkaDeliveryError(left, f"{left} record(s) still in flight after {timeout_s}s")
    if d.failures:
        raise KafkaDeliveryError(d.failures, d.first_error)


def _dead_letter_refused(
    producer: Producer,
    options: Mapping[str, str],
    topic: str,
    key: Any,
    value: Any,
    headers: list[tuple[str, bytes]],
    ref: str | None,
    role: str,
    exc: Exception,
    d: _Deliveries,
) -> None:
    """Produce the dead letter of a record the producer refused; raise if that fails too."""
    deadletter = options.get("deadlettertopic")
    if not deadletter:
        raise exc  # nowhere to put it: fail loudly rather than drop it
    dl_key, dl_value = unproducible.dead_letter(topic, key, value, headers, ref, role, exc)
    again = _produce(producer, deadletter, dl_key, dl_value, headers, d.on_other)
    if again is not None:
        raise again


class _Completion(NamedTuple):
    """A completion row, held until the events of the task are acknowledged."""

    topic: str
    key: bytes | None
    value: bytes
    headers: list[tuple[str, bytes]]
    ref: str | None
    label: str | None
    received_ms: int | None
    batch_ms: int | None


class _Columns:
    """One Arrow batch of output records as Python lists, one per column.

    Read column by column rather than with ``to_pydict``: that builds a dict for every
    header of every row, which was most of the sink's time for a batch of events.
    """

    def __init__(self, batch: pa.RecordBatch) -> None:
        n = batch.num_rows
        cols = {
            name: batch.column(j).to_pylist()
            for j, name in enumerate(batch.schema.names)
            if name != "headers"
        }
        none: list[Any] = [None] * n
        self.topic, self.key, self.value = cols["topic"], cols["key"], cols["value"]
        # The two-phase write's columns; plain records have none of them.
        self.role: list[str] = cols.get("role") or ["record"] * n
        self.label: list[str | None] = cols.get("label") or none
        self.ref: list[str | None] = cols.get("ref") or none
        self.event_id: list[str] = cols.get("event_id") or none
        self.received_ms: list[int | None] = cols.get("received_ms") or none
        self.batch_ms: list[int | None] = cols.get("batch_ms") or none
        self.headers = _headers(batch.column("headers"))

    def record(self, i: int) -> tuple[str, bytes | None, bytes | None, list[tuple[str, bytes]]]:
        """Return row ``i``'s topic, key, value and headers."""
        return self.topic[i], self.key[i], self.value[i], self.headers[i]

    def completion(self, i: int) -> _Completion:
        """Return row ``i`` as a completion to produce after the events."""
        return _Completion(
            self.topic[i],
            self.key[i],
            self.value[i],
            self.headers[i],
            self.ref[i],
            self.label[i],
            self.received_ms[i],
            self.batch_ms[i],
        )


def _headers(column: pa.Array) -> list[list[tuple[str, bytes]]]:
    """Return each row's Kafka headers as ``(key, value)`` pairs (a null list: none)."""
    entries = column.values  # every row's headers, in order; offsets say whose is whose
    pairs = list(
        zip(entries.field("key").to_pylist(), entries.field("value").to_pylist(), strict=True)
    )
    offsets = column.offsets.to_pylist()
    valid = column.is_valid().to_pylist()
    return [pairs[offsets[i] : offsets[i + 1]] if valid[i] else [] for i in range(len(column))]


class KafkaStreamWriter(DataSourceStreamArrowWriter):
    """Writes each task's rows to Kafka and returns only after the broker acknowledged all."""

    def __init__(self, options: Mapping[str, str]) -> None:
        # Spark hands options over case-insensitively; keep one spelling: lower case.
        self.options = {k.lower(): v for k, v in options.items()}

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkReport:
        """Produce, flush, then build and produce the completions; raise on any failure."""
        # A task's completions, refs and the rows being read stay alive until its end, and
        # each young collection walked them: with Python's thresholds ~15% of the sink's CPU
        # for a task of events (docs/benchmarks.md, issue 40). They are freed by reference
        # counting; what the task leaves is collected once, at its end.
        with worker_gc.batch_scope():
            report = self._write(iterator)
        worker_gc.freeze_survivors()
        return report

    def _write(self, iterator: Iterator[pa.RecordBatch]) -> SinkReport:
        producer = _producer(self.options)
        timeout_s = float(self.options.get("flushtimeoutseconds", "60"))
        report = SinkReport()
        d = _Deliveries()
        refs: dict[str | None, list[tuple[str, int]]] = defaultdict(list)
        completions: list[_Completion] = []
        failed: dict[str | None, Exception] = {}  # ref -> why a record of that message was refused
        index = 0
        started = time.perf_counter()
        in_sink = 0.0  # time spent here, not waiting for the keyed state upstream
        for batch in iterator:
            t0 = time.perf_counter()
            rows = _Columns(batch)
            for (role, label), count in Counter(zip(rows.role, rows.label, strict=True)).items():
                report.counts[f"{role}:{label}" if label else role] += count
            for i in range(batch.num_rows):
                role = rows.role[i]
                if role == "completion":
                    completions.append(rows.completion(i))
                    continue
                ref = rows.ref[i]
                if role == "event":
                    refs[ref].append((rows.event_id[i], index))
                    cb = d.callback(index)
                else:
                    cb = d.on_other
                topic, key, value, headers = rows.record(i)
                refused = _produce(producer, topic, key, value, headers, cb)
                if refused is not None:
                    if ref:
                        failed[ref] = refused
                    _dead_letter_refused(
                        producer, self.options, topic, key, value, headers, ref, role, refused, d
                    )
                    report.counts[f"deadletter:{unproducible.REASON}"] += 1
                else:
                    report.counts[BYTES] += len(value or b"") + len(key or b"")
                index += 1
            in_sink += time.perf_counter() - t0
        produced = time.perf_counter()
        _flush(producer, d, timeout_s)
        flushed = time.perf_counter()
        report.timing_ms["produce"] = in_sink * 1000
        report.timing_ms["wait_upstream"] = (produced - started - in_sink) * 1000
        report.timing_ms["flush"] = (flushed - produced) * 1000
        if completions:
            self._complete(producer, completions, refs, failed, d, report)
            _flush(producer, d, timeout_s)
            report.timing_ms["completions"] = (time.perf_counter() - flushed) * 1000
        return report

    def _complete(
        self,
        producer: Producer,
        completions: list[_Completion],
        refs: dict[str | None, list[tuple[str, int]]],
        failed: dict[str | None, Exception],
        d: _Deliveries,
        report: SinkReport,
    ) -> None:
        """Produce the completions, each with the coordinates of its message's acked events."""
        batch_ms = completions[0].batch_ms or 0
        acked_ms = time.time() * 1000
        for c in completions:
            if c.ref in failed and c.label == "ENRICHED":
                # Its events were refused and dead-lettered: say so, with no refs.
                value = unproducible.dead_lettered(c.value, failed[c.ref])
                report.counts["completion:ENRICHED"] -= 1
                report.counts["completion:DEAD_LETTERED"] += 1
            else:
                mine = refs.get(c.ref, []) if c.label == "ENRICHED" else []
                value = with_event_refs(c.value, [(eid, *d.coords[i]) for eid, i in mine])
            refused = _produce(producer, c.topic, c.key, value, c.headers, d.on_other)
            if refused is not None:
                _dead_letter_refused(
                    producer,
                    self.options,
                    c.topic,
                    c.key,
                    value,
                    c.headers,
                    c.ref,
                    "completion",
                    refused,
                    d,
                )
                report.counts[f"deadletter:{unproducible.REASON}"] += 1
                continue
            report.counts[BYTES] += len(value) + len(c.key or b"")
            if c.received_ms:
                report.sample("ingest_to_read", batch_ms - c.received_ms)
                report.sample("read_to_ack", acked_ms - batch_ms)
                report.sample("ingest_to_ack", acked_ms - c.received_ms)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Append the batch's counts to ``statsPath`` (read by the job's metrics listener)."""
        path = self.options.get("statspath")
        if not path:
            return
        counts: Counter[str] = Counter()
        timing: dict[str, float] = {}
        hist: dict[str, list[float]] = {}
        for m in messages:
            if isinstance(m, SinkReport):
                counts.update(m.counts)
                for name, ms in m.timing_ms.items():
                    timing[name] = timing.get(name, 0.0) + ms
                for name, samples in m.latency_ms.items():
                    hist.setdefault(name, []).extend(samples)
        with open(path, "a", encoding="utf-8") as out:
            line = {"batch_id": batchId, "counts": counts, "latency_ms": hist, "timing_ms": timing}
            out.write(json.dumps(line))
            out.write("\n")

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to undo: records already acknowledged stay (at-least-once, stable ids)."""


class KafkaSinkDataSource(DataSource):
    """``writeStream.format("headwater-kafka")``: the two-phase Kafka sink above.

    Options: ``kafka.*`` (librdkafka settings), ``statsPath``, ``deadLetterTopic``,
    ``flushTimeoutSeconds``.
    """

    @classmethod
    def name(cls) -> str:
        """Return the format name."""
        return SINK_NAME

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        """Return the stream writer."""
        return KafkaStreamWriter(self.options)
