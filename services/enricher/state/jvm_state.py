"""The per-device keyed state in the JVM (jvm/enricher-state), called from PySpark.

``apply`` is the one place that touches py4j: the decoded rows go to
``io.headwater.enricher.state.EnricherState.apply`` (a Java ``StatefulProcessor`` run by
Spark's JVM ``transformWithState`` on RocksDB) and come back as ``schema.OUTPUT`` records for
the Python sink. The policy crosses as ``key=value`` lines, so no Python object enters the JVM.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from headwater.enricher.hop.arrow_hop import HOP, decoder, inputs
from headwater.enricher.hop.schema import OUTPUT, field_names
from headwater.enricher.source.keys import key_columns
from headwater.enricher.state.policy import Policy
from headwater.runtime import jvm

ENTRY = "io.headwater.enricher.state.EnricherState"


class StateOperatorMissingError(jvm.JvmSetupError):
    """The JVM operator's jar is not on Spark's classpath."""


def policy_lines(policy: Policy) -> str:
    """Return ``policy`` as the ``key=value`` lines the JVM's Policy reads."""
    t = policy.topics
    values: dict[str, object] = {
        "topic.completions": t.completions,
        "topic.deadletter": t.deadletter,
        "topic.retry": t.retry,
        "topic.state": t.state,
        **{f"topic.event.{kind}": topic for kind, topic in t.events},
        "max_attempts": policy.max_attempts,
        "backoff_ms": policy.backoff_ms,
        "backoff_max_ms": policy.backoff_max_ms,
        "dedup_window_ms": policy.dedup_window_ms,
        "dedup_horizon_ms": policy.dedup_horizon_ms,
        "max_latest_values": policy.max_latest_values,
        "max_parked_bytes": policy.max_parked_bytes,
        "dedup_max_recent_ids": policy.dedup_max_recent_ids,
        "dedup_max_ids_per_hour": policy.dedup_max_ids_per_hour,
    }
    return "".join(f"{k}={v}\n" for k, v in values.items())


def decode(keyed: DataFrame, master_topic: str) -> DataFrame:
    """Return keyed raw rows (``keys.key_columns``) with the hop's columns (``arrow_hop.HOP``).

    The keyed columns stay in the JVM; the hop's struct is spread into top-level columns
    beside them, where the JVM operator finds them by name.
    """
    from pyspark.sql.functions import arrow_udf
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    hop = StructType.fromDDL(HOP)
    assert isinstance(hop, StructType)
    # Its kind (iterator of argument tuples) from the function's type hints, which PySpark
    # prefers to a functionType; its stubs have no overload for that form.
    run = arrow_udf(decoder(master_topic, to_arrow_schema(hop)), hop)  # type: ignore[call-overload]
    return keyed.select("*", run(*inputs()).alias("hop")).select(*keyed.columns, "hop.*")


def apply(decoded: DataFrame, policy: Policy) -> DataFrame:
    """Return the output records (``schema.OUTPUT``) of decoded rows, per device in the JVM.

    Raises:
        StateOperatorMissingError: the operator's jar is not on Spark's classpath.
    """
    spark = decoded.sparkSession
    entry = _entry(spark)
    out = DataFrame(entry.apply(decoded._jdf, policy_lines(policy)), spark)
    if out.columns != field_names(OUTPUT):
        raise RuntimeError(f"the JVM operator writes {out.columns}, the sink reads {OUTPUT}")
    return out


def ids_forgotten(spark: SparkSession) -> Callable[[], int]:
    """Return a reader of the dedup ids the bounds forgot in ``spark``'s queries so far.

    It reads the operator's accumulator (one per Spark context) on the driver, where Spark
    adds each task's count as the task finishes: after a micro-batch, that batch's are in.
    A task run again (a lost executor, a batch replayed after a restart) counts again.

    Raises:
        StateOperatorMissingError: the operator's jar is not on Spark's classpath.
    """
    accumulator = _entry(spark).idsForgotten(spark.sparkContext._jsc.sc())
    return lambda: int(accumulator.value())


def process_devices(raw: DataFrame, policy: Policy) -> DataFrame:
    """Return the output records of raw Kafka rows: key, Python hop, JVM keyed state."""
    keyed = key_columns(raw, policy.topics.master)
    return apply(decode(keyed, policy.topics.master), policy)


def _entry(spark: SparkSession) -> Any:
    from py4j.java_gateway import JavaClass

    gateway = spark.sparkContext._jvm
    assert gateway is not None
    entry = gateway
    for part in ENTRY.split("."):
        entry = getattr(entry, part)
    if not isinstance(entry, JavaClass):
        raise StateOperatorMissingError(
            f"{ENTRY} is not on Spark's classpath: run `make install` (it builds "
            f"jvm/enricher-state into {jvm.jvm_dir() / jvm.ENRICHER_STATE}); the enricher adds "
            "that jar to spark.jars, the enricher image to /opt/spark/jars"
        )
    return entry
