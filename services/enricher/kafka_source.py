"""Spark Python Data Source "headwater-kafka": a Kafka stream reader on confluent-kafka.

It yields the columns of Spark's own Kafka source (key, value, topic, partition, offset,
timestamp, timestampType, headers), so the job can switch to the JVM connector by
configuration. Spark keeps the offsets in its checkpoint; the consumer never commits.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows
from pyspark.sql.types import StructType

from headwater.enricher import kafka_offsets as ko
from headwater.enricher.errors import EnricherError, OffsetGapError, PartitionStalledError

#: Spark's built-in "kafka" name would win over ours, so the source has a name of its own.
SOURCE_NAME = "headwater-kafka"
KAFKA_SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int, headers array<struct<key:string,value:binary>>"
)
_ARROW_SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("timestampType", pa.int32()),
        ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
    ]
)
_ARROW_ROWS = 8192
#: How long a partition may sit at its end before the planned range is declared gone.
_EOF_GRACE_S = 5.0
_GAP_CODES = {KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE}


def client_config(options: Mapping[str, str]) -> dict[str, Any]:
    """Return librdkafka settings from the ``kafka.*`` options (as Spark's source takes them)."""
    return {k[len("kafka.") :]: v for k, v in options.items() if k.startswith("kafka.")}


#: Producer settings the sink takes from the shared ``kafka.*`` options; a consumer warns
#: about each one it receives, so they are left out of its configuration.
PRODUCER_ONLY = frozenset({"acks", "enable.idempotence", "linger.ms", "compression.type"})


def _consumer(options: Mapping[str, str], **extra: Any) -> Consumer:
    shared = {k: v for k, v in client_config(options).items() if k not in PRODUCER_ONLY}
    conf = shared | {
        # Offsets live in Spark's checkpoint; the group id is required but never committed.
        "group.id": options.get("groupid", "headwater-enricher"),
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        # A missing offset must surface as an error, never be reset silently.
        "auto.offset.reset": "error",
        "isolation.level": "read_committed",
    }
    return Consumer(conf | extra)


class KafkaRange(InputPartition):
    """One Spark task: offsets ``[start, end)`` of one Kafka partition."""

    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        super().__init__((topic, partition, start, end))
        self.topic, self.partition, self.start, self.end = topic, partition, start, end


class KafkaStreamReader(DataSourceStreamReader):
    """Plans micro-batches from partition offsets, with admission control."""

    def __init__(self, options: Mapping[str, str]) -> None:
        # Spark hands options over case-insensitively; keep one spelling: lower case.
        self.options = {k.lower(): v for k, v in options.items()}
        self.topics = [s.strip() for s in options["subscribe"].split(",") if s.strip()]
        raw_max = options.get("maxoffsetspertrigger")
        self.max_records = int(raw_max) if raw_max else None
        self.scan = options.get("endoffsets", "scan") == "scan"
        self._client: Consumer | None = None  # created on first use: no I/O in __init__
        self._known_end: dict[tuple[str, int], int] = {}
        self._latest: dict[tuple[str, int], int] = {}

    def _meta(self) -> Consumer:
        if self._client is None:
            self._client = _consumer(self.options, **{"group.id": "headwater-enricher-planner"})
        return self._client

    def _bounds(self) -> dict[tuple[str, int], tuple[int, int]]:
        """Return ``{(topic, partition): (low, end)}`` for every subscribed partition."""
        client = self._meta()
        bounds: dict[tuple[str, int], tuple[int, int]] = {}
        for topic in self.topics:
            meta = client.list_topics(topic, timeout=15).topics.get(topic)
            if meta is None or meta.error is not None or not meta.partitions:
                raise EnricherError(
                    f"topic {topic!r} does not exist: create it (headwater topics ensure)"
                )
            for p in meta.partitions:
                low, high = client.get_watermark_offsets(TopicPartition(topic, p), timeout=15)
                bounds[(topic, p)] = (low, high)
        ends = self._scan_ends(bounds) if self.scan else {tp: h for tp, (_, h) in bounds.items()}
        return {tp: (low, ends[tp]) for tp, (low, _) in bounds.items()}

    def _scan_ends(
        self, bounds: dict[tuple[str, int], tuple[int, int]]
    ) -> dict[tuple[str, int], int]:
        """Find the true end of partitions whose watermark moved.

        Why: the embedded broker reports the high watermark of a multi-record batch as its
        base offset + 1, so the watermark alone would leave the tail of the last batch
        unread until more data arrives. Reading the last batch tells its real end.
        """
        ends: dict[tuple[str, int], int] = {}
        probe: dict[tuple[str, int], int] = {}
        for tp, (low, high) in bounds.items():
            known = self._known_end.get(tp, -1)
            if high <= low:
                ends[tp] = high
            elif known >= high:
                ends[tp] = known  # no new batch since the last scan
            else:
                probe[tp] = max(high - 1, low)
                ends[tp] = high
        if probe:
            client = self._meta()
            client.assign([TopicPartition(t, p, o) for (t, p), o in probe.items()])
            waiting = set(probe)
            deadline = time.monotonic() + 5.0
            while waiting and time.monotonic() < deadline:
                msgs = client.consume(10_000, timeout=0.2)
                if not msgs:
                    break  # the last batch arrives in one fetch; silence means we saw it
                for m in msgs:
                    tp = (str(m.topic()), int(m.partition() or 0))
                    err = m.error()
                    if err is None:
                        ends[tp] = max(ends[tp], int(m.offset() or 0) + 1)
                    elif err.code() == KafkaError._PARTITION_EOF:
                        waiting.discard(tp)
            client.unassign()
        self._known_end.update(ends)
        return ends

    def initialOffset(self) -> dict:
        """Return the explicit starting offsets ("earliest" or "latest")."""
        which = self.options.get("startingoffsets", "")
        if which not in ("earliest", "latest"):
            raise EnricherError("startingOffsets must be 'earliest' or 'latest'")
        bounds = self._bounds()
        pick = 0 if which == "earliest" else 1
        return ko.nest({tp: b[pick] for tp, b in bounds.items()})

    def getDefaultReadLimit(self) -> ReadLimit:
        """Return the admission-control limit (``maxOffsetsPerTrigger``)."""
        return ReadMaxRows(self.max_records) if self.max_records else ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """Return the end of the next batch; fail loudly when the log lost our offsets."""
        begin = ko.flatten(start)
        bounds = self._bounds()
        for tp, (low, end) in bounds.items():
            # A partition added while running is read from its beginning.
            begin.setdefault(tp, low)
            ko.check_range(tp[0], tp[1], begin[tp], low, end)
        self._latest = {tp: end for tp, (_, end) in bounds.items()}
        cap = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        return ko.nest(ko.admit(begin, self._latest, cap))

    def reportLatestOffset(self) -> dict | None:
        """Return the newest offsets seen, so Spark's progress shows the lag."""
        return ko.nest(self._latest) if self._latest else None

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        """Return one task per partition with data in ``[start, end)``."""
        begin, stop = ko.flatten(start), ko.flatten(end)
        return [
            KafkaRange(t, p, begin.get((t, p), 0), e)
            for (t, p), e in sorted(stop.items())
            if e > begin.get((t, p), 0)
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Read one partition range as Arrow batches (runs on an executor)."""
        assert isinstance(partition, KafkaRange)
        yield from read_range(self.options, partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: offsets are Spark's, never committed to the group."""

    def stop(self) -> None:
        """Close the planning consumer."""
        if self._client is not None:
            self._client.close()
            self._client = None


def read_range(options: Mapping[str, str], r: KafkaRange) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``r`` as Arrow batches; raise on gaps instead of skipping."""
    stall_s = float(options.get("stalltimeoutseconds", "60"))
    consumer = _consumer(options)
    try:
        consumer.assign([TopicPartition(r.topic, r.partition, r.start)])
        rows: list[tuple[Any, ...]] = []
        pos, last_progress, last_data = r.start, time.monotonic(), time.monotonic()
        at_eof = False
        while pos < r.end:
            msgs = consumer.consume(min(10_000, r.end - pos), timeout=0.5)
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        # Transaction markers or compaction can leave the end offset unused.
                        pos = max(pos, int(m.offset() or 0))
                        at_eof = True
                        continue
                    if err.code() in _GAP_CODES:
                        low, high = consumer.get_watermark_offsets(
                            TopicPartition(r.topic, r.partition), timeout=10
                        )
                        raise OffsetGapError(r.topic, r.partition, pos, low, high, "deleted")
                    raise KafkaException(err)
                off = int(m.offset() or 0)
                if off >= r.end:
                    pos = r.end
                    break
                ts_type, ts_ms = m.timestamp()
                rows.append(
                    (m.key(), m.value(), off, int(ts_ms) * 1000, ts_type, m.headers() or [])
                )
                pos = off + 1
                last_data, at_eof = time.monotonic(), False
            if msgs:
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > stall_s:
                raise PartitionStalledError(r.topic, r.partition, pos, r.end)
            if at_eof and pos < r.end and time.monotonic() - last_data > _EOF_GRACE_S:
                # The planned range was in the log when planned (a replayed batch of the
                # offset log is not re-planned), so a log that now ends before it was
                # replaced or truncated.
                low, high = consumer.get_watermark_offsets(
                    TopicPartition(r.topic, r.partition), timeout=10
                )
                if high <= pos:
                    raise OffsetGapError(r.topic, r.partition, pos, low, high, "beyond")
            if len(rows) >= _ARROW_ROWS:
                yield _to_arrow(r, rows)
                rows = []
        if rows:
            yield _to_arrow(r, rows)
    finally:
        consumer.close()


def _to_arrow(r: KafkaRange, rows: list[tuple[Any, ...]]) -> pa.RecordBatch:
    keys, values, offs, ts, tst, hdrs = zip(*rows, strict=True)
    n = len(rows)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(keys, pa.binary()),
            pa.array(values, pa.binary()),
            pa.array([r.topic] * n, pa.string()),
            pa.array([r.partition] * n, pa.int32()),
            pa.array(offs, pa.int64()),
            pa.array(ts, pa.timestamp("us", tz="UTC")),
            pa.array(tst, pa.int32()),
            pa.array(
                [[{"key": k, "value": v} for k, v in h] for h in hdrs],
                _ARROW_SCHEMA.field("headers").type,
            ),
        ],
        schema=_ARROW_SCHEMA,
    )


class KafkaDataSource(DataSource):
    """``spark.readStream.format("headwater-kafka")`` and the matching stream sink.

    Options: ``kafka.bootstrap.servers`` (and any other ``kafka.*`` librdkafka setting),
    ``subscribe`` (comma-separated topics), ``startingOffsets`` (earliest|latest),
    ``maxOffsetsPerTrigger``, ``endOffsets`` (scan|watermark). Sink options: see
    :mod:`headwater.enricher.kafka_sink`.
    """

    @classmethod
    def name(cls) -> str:
        """Return the format name (not "kafka": Spark's built-in source would win)."""
        return SOURCE_NAME

    def schema(self) -> str:
        """Return the columns of Spark's own Kafka source."""
        return KAFKA_SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """Return the stream reader."""
        return KafkaStreamReader(self.options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        """Return the stream writer (imported here to keep the reader light)."""
        from headwater.enricher.kafka_sink import KafkaStreamWriter

        return KafkaStreamWriter(self.options)
