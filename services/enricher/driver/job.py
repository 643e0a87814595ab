"""The enricher's streaming job: the only module with ``readStream`` and ``writeStream``.

raw Kafka rows -> key (tenant, device; in the JVM) -> one Python hop (decode, normalize) ->
keyed device state in the JVM (dedupe, enrich, park, snapshot; ``jvm_state``) -> Kafka
records, written by the "headwater-kafka" sink (events first, then completions carrying the
events' coordinates).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from headwater.enricher.driver.settings import EnricherSettings
from headwater.enricher.errors import StartingOffsetsRequiredError
from headwater.enricher.sink.kafka_sink import KafkaSinkDataSource
from headwater.enricher.state import jvm_state
from headwater.enricher.state.policy import Policy
from headwater.runtime import jvm

log = logging.getLogger(__name__)
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
ROCKSDB_CONF = "spark.sql.streaming.stateStore.rocksdb"


def build_session(
    settings: EnricherSettings,
    app_name: str = "headwater-enricher",
    extra_jars: Sequence[str] = (),
) -> SparkSession:
    """Return a Spark session set up for the enricher (RocksDB state, our Kafka source).

    ``extra_jars`` go on ``spark.jars`` beside the connector's and the operator's, for a run
    that is not spark-submitted (whose classpath is the submitter's).
    """
    # Python workers must run this interpreter, the one with headwater installed.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    # spark-submit (the operator calls it too) starts the JVM with its settings, spark.master
    # among them, and hands Python the gateway; a SparkConf made before the context cannot
    # see those settings, so the gateway is the sign.
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ
    if settings.spark_master:
        builder = builder.master(settings.spark_master)
    elif not submitted:
        builder = builder.master("local[*]")
    if not submitted:
        # The image has the connector on Spark's classpath; a direct run takes the jars
        # `make install` copied.
        builder = builder.config("spark.jars", ",".join([connector_jars(), *extra_jars]))
        # Read when Spark's JVM starts (so only here, before getOrCreate); a local run keeps
        # the keyed state in the driver, and Spark's 1 GB default left too little room.
        builder = builder.config("spark.driver.memory", settings.driver_memory)
    spark = (
        builder.config("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
        # A batch's commit writes a changelog of its updates instead of a RocksDB snapshot
        # (snapshots are made in the background): the enricher's p99 at 5,000 msg/s fell from
        # 4.1 to 2.2 s in one run (docs/benchmarks.md). Spark reads old checkpoints with it on.
        .config(f"{ROCKSDB_CONF}.changelogCheckpointing.enabled", "true")
        # The total-rows metric costs a read before every write; nothing here reads it.
        .config(f"{ROCKSDB_CONF}.trackTotalNumberOfRows", "false")
        .config("spark.sql.shuffle.partitions", str(settings.shuffle_partitions))
        .config("spark.ui.enabled", "false")
        # Operators read JSON logs; progress bars on stderr only garble them.
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    register_sources(spark)
    return spark


def connector_jars() -> str:
    """Return ``spark.jars``: Spark's Kafka connector and the JVM state operator, if built.

    The operator's jar is optional here: a session that runs no enricher query starts without
    it, and ``jvm_state.apply`` names the fix (``make install``) when the query needs it.
    """
    jars = [*jvm.jars(jvm.SPARK_KAFKA)]
    with contextlib.suppress(jvm.JvmSetupError):
        jars += jvm.jars(jvm.ENRICHER_STATE)
    return ",".join(str(p) for p in jars)


def register_sources(spark: SparkSession) -> None:
    """Register the "headwater-kafka" sink (a Python data source) with ``spark``."""
    spark.dataSource.register(KafkaSinkDataSource)


def kafka_options(settings: EnricherSettings) -> dict[str, str]:
    """Return the sink's ``kafka.*`` options: the shared keyed-record producer configuration.

    ``KafkaSettings.producer_config``: security, client.id, acks=all, idempotence and the one
    partitioner, so an event lands on its device's partition as ingest's records do.
    """
    conf = settings.kafka.producer_config("headwater-enricher-sink")
    return {
        f"kafka.{k}": str(v).lower() if isinstance(v, bool) else str(v) for k, v in conf.items()
    }


def checkpoint_exists(spark: SparkSession, location: str) -> bool:
    """Return True when ``location`` holds a query's offset log (any Hadoop file system)."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    path = jvm.org.apache.hadoop.fs.Path(location.rstrip("/") + "/offsets")
    fs = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    return bool(fs.exists(path)) and len(fs.listStatus(path)) > 0


def read_ingest(spark: SparkSession, settings: EnricherSettings) -> DataFrame:
    """Return the raw stream of the ingest and master-data topics (Kafka source columns).

    Two sources in one query: the ingest topics, throttled by ``maxOffsetsPerTrigger``,
    from the starting offsets a person chose (or the checkpoint); and the compacted
    master-data topic, unthrottled and from its beginning whenever a checkpoint is new, so
    a device's master record is never queued behind a backlog of its own messages (which
    would park, then dead-letter, good data).
    """
    starting = settings.starting_offsets
    if not starting and not checkpoint_exists(spark, settings.checkpoint_location):
        raise StartingOffsetsRequiredError(settings.checkpoint_location)
    ingest = kafka_stream(
        spark,
        settings,
        settings.topics.ingest,
        {
            "startingOffsets": starting or "earliest",
            "maxOffsetsPerTrigger": str(settings.max_records_per_trigger),
        },
    )
    master = kafka_stream(
        spark, settings, [settings.topics.master], {"startingOffsets": "earliest"}
    )
    return ingest.unionByName(master)


def kafka_stream(
    spark: SparkSession, settings: EnricherSettings, topics: Sequence[str], extra: dict[str, str]
) -> DataFrame:
    """Return a stream of ``topics`` from Spark's own Kafka source.

    ``extra`` holds source options such as ``startingOffsets`` (ignored once the checkpoint
    has this source's offsets) and ``maxOffsetsPerTrigger``.
    """
    options = {"subscribe": ",".join(topics), **extra}
    # Java client properties (JAAS, PEM trust and key stores, client.id) from the one module.
    java = settings.kafka.java_config("headwater-enricher-source")
    options |= {f"kafka.{k}": v for k, v in java.items()}
    # A gap in the log (retention, a recreated topic) stops the query; a person decides.
    options |= {"includeHeaders": "true", "failOnDataLoss": "true"}
    # A task's fetch at the end of its range otherwise waits the broker's default 500 ms
    # for more data; tasks run in waves on few cores, so a 10-record batch over six
    # partitions took 1.7 s instead of 0.3 s (docs/benchmarks.md, Kafka source).
    options.setdefault("kafka.fetch.max.wait.ms", "10")
    return spark.readStream.format("kafka").options(**options).load()


def policy_of(settings: EnricherSettings) -> Policy:
    """Return the keyed state's policy that ``settings`` describe (durations in milliseconds)."""
    return Policy(
        topics=settings.topics,
        max_attempts=settings.max_attempts,
        backoff_ms=int(settings.retry_backoff_seconds * 1000),
        backoff_max_ms=int(settings.retry_backoff_max_seconds * 1000),
        dedup_window_ms=int(settings.dedup_window_seconds * 1000),
        max_latest_values=settings.max_latest_values,
        dedup_horizon_ms=int(settings.dedup_horizon_seconds * 1000),
        max_parked_bytes=settings.max_parked_bytes,
        dedup_max_recent_ids=settings.dedup_max_recent_ids,
        dedup_max_ids_per_hour=settings.dedup_max_ids_per_hour,
    )


def enrich_stream(raw: DataFrame, settings: EnricherSettings) -> DataFrame:
    """Return the output records (``schema.OUTPUT``) of raw Kafka rows."""
    return jvm_state.process_devices(raw, policy_of(settings))


def start(
    spark: SparkSession, settings: EnricherSettings, stats_path: str | None = None
) -> StreamingQuery:
    """Start the enricher query; return it running."""
    return write_stream(enrich_stream(read_ingest(spark, settings), settings), settings, stats_path)


def write_stream(
    out: DataFrame, settings: EnricherSettings, stats_path: str | None = None
) -> StreamingQuery:
    """Start writing output records (``schema.OUTPUT``) through the enricher's sink; return it.

    ``stats_path`` is the sink's statistics file (a fresh temporary one by default).
    """
    stats_path = stats_path or os.path.join(
        tempfile.mkdtemp(prefix="enricher-stats-"), "stats.jsonl"
    )
    # The sink is always ours: completions need the events' acknowledged coordinates,
    # which Spark's JVM Kafka sink does not expose.
    return (
        out.writeStream.format("headwater-kafka")
        .options(**kafka_options(settings))
        .option("statsPath", stats_path)
        # Records the producer refuses (too large) become dead letters there.
        .option("deadLetterTopic", settings.topics.deadletter)
        .option("checkpointLocation", settings.checkpoint_location)
        .queryName("headwater-enricher")
        .trigger(processingTime=f"{int(settings.trigger_interval_seconds * 1000)} milliseconds")
        .start()
    )
