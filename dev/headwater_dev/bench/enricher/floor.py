"""The keyed-state floor: the enricher's query shape with none of its work, for the benchmark.

Same source, same JVM key columns, one ``transformWithState`` with one value read and one
written per key and batch (the enricher's composite value costs the same calls), one
completion-shaped record per ingest record through the same sink. What it costs per batch
is what PySpark's keyed state and the sink cost on this machine before any decoding,
dedup, enrichment or routing of ours: a target below it cannot be met by changing our
per-message code, only by the design or the machine.

Keyed by (tenant, device) as the enricher is, or with ``buckets`` > 0 by a hash bucket of
devices (the value then counts each device of the bucket): what fewer keys per batch, and
so fewer round trips between the Python worker and the JVM, would save.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

# At module level: PySpark reads the Arrow UDF's kind from its type hints, resolved in this
# module's globals.
import pyarrow as pa
from py4j.java_gateway import JavaClass
from pyspark.sql import DataFrame, Row
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

from headwater.enricher.driver.settings import EnricherSettings
from headwater.enricher.hop.arrow_hop import HOP, inputs
from headwater.enricher.hop.schema import OUTPUT
from headwater.enricher.source.keys import key_columns
from headwater.runtime import jvm


class FloorProcessor(StatefulProcessor):
    """Counts each device's messages in the key's one value; one record per ingest record."""

    def __init__(self, completions_topic: str, master_topic: str) -> None:
        self.topic = completions_topic
        self.master_topic = master_topic

    def init(self, handle: StatefulProcessorHandle) -> None:
        """Declare the one value of a key: message counts by device, as JSON."""
        self.counts = handle.getValueState("counts", "counts string")

    def handleInputRows(
        self, key: Any, rows: Iterator[Row], timerValues: TimerValues
    ) -> Iterator[Row]:
        """Emit each row's headers on the completions topic (the benchmark's watch reads them)."""
        now = timerValues.getCurrentProcessingTimeInMs()
        seen = self.counts.get()
        counts: dict[str, int] = json.loads(seen[0]) if seen else {}
        out = []
        for row in rows:
            # The last seven columns are schema.KEYED's (a bucket column may come first).
            _tenant, device, topic, partition, offset, _value, headers = row[-7:]
            if topic == self.master_topic:
                continue  # the enricher completes ingest records only
            counts[device] = counts.get(device, 0) + 1
            out.append(
                Row(
                    topic=self.topic,
                    key=device.encode(),
                    value=b"",
                    headers=headers,  # PySpark hands structs over as dicts, as OUTPUT takes them
                    role="completion",
                    label="FLOOR",
                    ref=f"{topic}/{partition}/{offset}",
                    event_id=None,
                    received_ms=None,
                    batch_ms=now,
                )
            )
        self.counts.update((json.dumps(counts),))
        return iter(out)


def floor_stream(raw: DataFrame, settings: EnricherSettings, buckets: int = 0) -> DataFrame:
    """Return the floor's output records (``schema.OUTPUT``) of raw Kafka rows.

    Args:
        raw: the Kafka source's rows.
        settings: the enricher's settings (topics).
        buckets: 0 to key by (tenant, device) like the enricher, else by this many buckets.
    """
    keyed = key_columns(raw, settings.topics.master)
    keys = ["tenant", "device_key"]
    if buckets:
        bucket = F.pmod(F.hash("tenant", "device_key"), F.lit(buckets)).alias("bucket")
        keyed, keys = keyed.select(bucket, "*"), ["bucket"]
    return keyed.groupBy(*keys).transformWithState(
        statefulProcessor=FloorProcessor(settings.topics.completions, settings.topics.master),
        outputStructType=OUTPUT,
        outputMode="Append",
        timeMode="ProcessingTime",
    )


#: The folder of ``headwater.runtime.jvm.jvm_dir()`` that holds the JVM floor's jar
#: (dev/jvm/bench-floor, built by ``make install``).
BENCH_FLOOR = "bench-floor"
#: The JVM floor's entry point (dev/jvm/bench-floor): the enricher's keyed operator, no work.
ENTRY = "io.headwater.bench.floor.Floor"


def jars() -> list[str]:
    """Return the JVM floor's jar, for ``spark.jars``; raise ``JvmSetupError`` if not built."""
    return [str(p) for p in jvm.jars(BENCH_FLOOR)]


def _jvm_floor(keyed: DataFrame, completions: str, master_topic: str) -> DataFrame:
    """Return the JVM floor's records of keyed rows (``keys.key_columns``, hop or not)."""
    spark = keyed.sparkSession
    gateway = spark.sparkContext._jvm
    assert gateway is not None
    entry = gateway
    for part in ENTRY.split("."):
        entry = getattr(entry, part)
    if not isinstance(entry, JavaClass):
        raise jvm.JvmSetupError(
            f"{ENTRY} is not on Spark's classpath: run `make install` (it builds "
            f"dev/jvm/bench-floor into {jvm.jvm_dir() / BENCH_FLOOR}) and start Spark with "
            "floor.jars() on spark.jars"
        )
    return DataFrame(entry.apply(keyed._jdf, completions, master_topic), spark)


def jvm_floor_stream(raw: DataFrame, settings: EnricherSettings) -> DataFrame:
    """Return the JVM floor's records: the JVM keyed operator with no work, no Python hop."""
    keyed = key_columns(raw, settings.topics.master)
    return _jvm_floor(keyed, settings.topics.completions, settings.topics.master)


def _empty_hop(schema: Any) -> Any:
    """Return a hop function (``arrow_hop.decoder``'s shape) that decodes nothing."""
    hop = pa.struct(list(schema))

    def run(batches: Iterator[tuple[pa.Array, ...]]) -> Iterator[pa.Array]:
        for columns in batches:
            yield pa.nulls(len(columns[0]), hop)

    return run


def _empty_decode(keyed: DataFrame) -> DataFrame:
    """Return ``keyed`` with the hop's columns as ``jvm_state.decode`` adds them, all null.

    The same Arrow UDF over the same arguments (``arrow_hop.inputs``), so the rows make the
    same trip to a Python worker and back; only the decoding is missing.
    """
    from pyspark.sql.functions import arrow_udf
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    hop = StructType.fromDDL(HOP)
    assert isinstance(hop, StructType)
    run = arrow_udf(_empty_hop(to_arrow_schema(hop)), hop)  # type: ignore[call-overload]
    return keyed.select("*", run(*inputs()).alias("hop")).select(*keyed.columns, "hop.*")


def jvm_hop_floor_stream(
    raw: DataFrame, settings: EnricherSettings, decoding: bool = False
) -> DataFrame:
    """Return the JVM floor's records behind the enricher's Python hop.

    The JVM floor's operator reads every column, so Spark cannot prune the hop. Without
    ``decoding`` the hop does no work: its arguments go to a Python worker over Arrow and a
    null ``HOP`` struct per row comes back, what the design's hop costs before any decoding
    of ours. With it, the hop is the enricher's own (``jvm_state.decode``): the enricher
    less its operator's work and its events.
    """
    from headwater.enricher.state import jvm_state

    keyed = key_columns(raw, settings.topics.master)
    hopped = jvm_state.decode(keyed, settings.topics.master) if decoding else _empty_decode(keyed)
    return _jvm_floor(hopped, settings.topics.completions, settings.topics.master)


def _stateless(completions: str, master_topic: str, schema: Any) -> Any:
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            rows = [
                {
                    "topic": completions,
                    "key": r["device_key"].encode(),
                    "value": b"",
                    "headers": r["headers"],
                    "role": "completion",
                    "label": "FLOOR",
                    "ref": f"{r['src_topic']}/{r['src_partition']}/{r['src_offset']}",
                    "batch_ms": 0,
                }
                for r in batch.to_pylist()
                if r["src_topic"] != master_topic
            ]
            yield pa.RecordBatch.from_pylist(rows, schema=schema)

    return run


def _arrow_output() -> Any:
    # On the driver: parsing DDL needs a session, which Python workers do not have.
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    output = StructType.fromDDL(OUTPUT)
    assert isinstance(output, StructType)
    return to_arrow_schema(output)


def stateless_floor_stream(raw: DataFrame, settings: EnricherSettings) -> DataFrame:
    """Return the stateless floor's records: one Python ``mapInArrow`` hop and the sink."""
    keyed = key_columns(raw, settings.topics.master)
    run = _stateless(settings.topics.completions, settings.topics.master, _arrow_output())
    return keyed.mapInArrow(run, OUTPUT)
