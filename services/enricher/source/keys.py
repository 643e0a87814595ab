"""The keyed state's key of raw Kafka rows, as Spark SQL expressions the JVM evaluates.

Built on the driver, evaluated in the JVM beside the Kafka source: no Python worker sees a
row before it has its key.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from headwater import record_headers as rh


def last_header(name: str) -> Column:
    """The value of the last ``name`` header of a row's ``headers`` (null when absent).

    Found by position in the reversed keys rather than with ``filter(headers, h -> ...)``:
    a lambda is interpreted row by row (looking up Spark's SQL config for every row: 7-8%
    of a drain's samples, docs/benchmarks.md), and it keeps the whole projection out of
    Spark's generated code.
    """
    last = F.reverse("headers")
    return F.get(last.getField("value"), F.array_position(last.getField("key"), name) - 1)


def key_columns(raw: DataFrame, master_topic: str) -> DataFrame:
    """Return raw Kafka rows with the keyed state's key, computed in the JVM.

    The key is ``(tenant, device_key)``: for ingest records the ``headwater-tenant`` header
    and the record key (ingest keys every record by its device id), for master records the
    two parts of ``"<tenant>/<device_id>"`` (as :func:`headwater.topics.split_scoped_key`).
    Computing it here, not in a Python step, lets records reach the keyed state with one
    Python hop (decode and normalize, ``arrow_hop``): each hop is an Arrow round trip of
    every row (docs/enricher.md, "where a batch's time goes").
    Bytes that are not UTF-8 become U+FFFD, as Python's ``decode("utf-8", "replace")``.

    Returns:
        The ``schema.KEYED`` columns.
    """
    key = F.expr("make_valid_utf8(coalesce(cast(key as string), ''))")
    device = F.substring_index(key, "/", -1)
    master_tenant = F.when(
        F.instr(key, "/") > 0, F.expr("substring(k, 1, length(k) - length(d) - 1)")
    ).otherwise(F.lit(""))
    last_tenant = last_header(rh.TENANT)
    tenant_header = F.make_valid_utf8(F.coalesce(last_tenant.cast("string"), F.lit("")))
    is_master = F.col("topic") == F.lit(master_topic)
    return (
        raw.withColumn("k", key)
        .withColumn("d", device)
        .select(
            F.when(is_master, master_tenant).otherwise(tenant_header).alias("tenant"),
            F.when(is_master, F.col("d")).otherwise(F.col("k")).alias("device_key"),
            F.col("topic").alias("src_topic"),
            F.col("partition").alias("src_partition"),
            F.col("offset").alias("src_offset"),
            "value",
            "headers",
        )
    )
