"""The enricher's streaming job: the only module with ``readStream`` and ``writeStream``.

raw Kafka rows -> decode -> normalize -> keyed device state (dedupe, enrich, park,
snapshot) -> Kafka records, written by the "headwater-kafka" sink (events first, then
completions carrying the events' coordinates).
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile

from pyspark import SparkConf
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from headwater.enricher.decode import decode
from headwater.enricher.errors import StartingOffsetsRequiredError
from headwater.enricher.kafka_source import PRODUCER_ONLY, KafkaDataSource
from headwater.enricher.normalize import normalize
from headwater.enricher.settings import EnricherSettings
from headwater.enricher.state import Policy, process_devices

log = logging.getLogger(__name__)
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def build_session(settings: EnricherSettings, app_name: str = "headwater-enricher") -> SparkSession:
    """Return a Spark session set up for the enricher (RocksDB state, our Kafka source)."""
    # Python workers must run this interpreter, the one with headwater installed.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if settings.spark_master:
        builder = builder.master(settings.spark_master)
    elif not SparkConf().contains("spark.master"):
        builder = builder.master("local[*]")  # run directly, not by spark-submit/operator
    spark = (
        builder.config("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
        .config("spark.sql.shuffle.partitions", str(settings.shuffle_partitions))
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    register_sources(spark)
    return spark


def register_sources(spark: SparkSession) -> None:
    """Register the "headwater-kafka" Python data source with ``spark``."""
    spark.dataSource.register(KafkaDataSource)


def kafka_options(settings: EnricherSettings) -> dict[str, str]:
    """Return the ``kafka.*`` client options shared by the source and the sink."""
    conf = settings.kafka.confluent_config() | {
        "enable.idempotence": settings.kafka.enable_idempotence,
        "linger.ms": settings.kafka.linger_ms,
        "compression.type": settings.kafka.compression_type,
    }
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
    """Return the raw stream of the ingest and master-data topics (Kafka source columns)."""
    topics = ",".join([*settings.topics.ingest, settings.topics.master])
    starting = settings.starting_offsets
    if not starting and not checkpoint_exists(spark, settings.checkpoint_location):
        raise StartingOffsetsRequiredError(settings.checkpoint_location)
    options = kafka_options(settings) | {
        "subscribe": topics,
        "startingOffsets": starting or "earliest",  # ignored when the checkpoint exists
        "maxOffsetsPerTrigger": str(settings.max_records_per_trigger),
    }
    if settings.kafka_io == "jvm":
        # Spark's own connector (spark-sql-kafka-0-10 on the classpath): same columns.
        # Java client names differ from librdkafka's; pass only what both understand.
        options = {
            k: v for k, v in options.items() if k.removeprefix("kafka.") not in PRODUCER_ONLY
        }
        options |= {"includeHeaders": "true", "failOnDataLoss": "true"}
        return spark.readStream.format("kafka").options(**options).load()
    options["endOffsets"] = settings.end_offsets
    return spark.readStream.format("headwater-kafka").options(**options).load()


def enrich_stream(raw: DataFrame, settings: EnricherSettings) -> DataFrame:
    """Return the output records (``schema.OUTPUT``) of raw Kafka rows."""
    policy = Policy(
        topics=settings.topics,
        max_attempts=settings.max_attempts,
        backoff_ms=int(settings.retry_backoff_seconds * 1000),
        backoff_max_ms=int(settings.retry_backoff_max_seconds * 1000),
        dedup_window_ms=int(settings.dedup_window_seconds * 1000),
    )
    return process_devices(normalize(decode(raw, settings.topics.master)), policy)


def start(
    spark: SparkSession, settings: EnricherSettings, stats_path: str | None = None
) -> StreamingQuery:
    """Start the enricher query; return it running."""
    out = enrich_stream(read_ingest(spark, settings), settings)
    stats_path = stats_path or os.path.join(
        tempfile.mkdtemp(prefix="enricher-stats-"), "stats.jsonl"
    )
    # The sink is always ours: completions need the events' acknowledged coordinates,
    # which Spark's JVM Kafka sink does not expose.
    return (
        out.writeStream.format("headwater-kafka")
        .options(**kafka_options(settings))
        .option("statsPath", stats_path)
        .option("checkpointLocation", settings.checkpoint_location)
        .queryName("headwater-enricher")
        .trigger(processingTime=f"{int(settings.trigger_interval_seconds * 1000)} milliseconds")
        .start()
    )
