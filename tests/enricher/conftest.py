"""Enricher fixtures: one local Spark session for the whole run, and Kafka helpers."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """A local[2] Spark session with the RocksDB state store and our Kafka source."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from headwater.enricher.job import register_sources

    session = (
        SparkSession.builder.master("local[2]")
        .appName("headwater-enricher-tests")
        .config("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register_sources(session)
    yield session
    session.stop()
