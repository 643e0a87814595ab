"""Enricher fixtures: one local Spark session for the whole run; queries started on it."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


@pytest.fixture(scope="session")
def spark(kafka_bootstrap: str) -> Iterator[object]:
    """A local[2] Spark session: RocksDB state store, Spark's Kafka connector, ours, the floor's.

    It asks for the broker so that the broker outlives it: the sink's producers in the
    Python workers would otherwise log connection failures until Spark stops.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from headwater.enricher.driver.job import connector_jars, register_sources
    from headwater_dev.bench.enricher import floor as bench_floor

    session = (
        SparkSession.builder.master("local[2]")
        .appName("headwater-enricher-tests")
        .config("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        # The benchmark's JVM floor too (tests/enricher/test_bench_tools.py runs it).
        .config("spark.jars", ",".join([connector_jars(), *bench_floor.jars()]))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    # The streaming query manager registers the state store coordinator; batch
    # transformWithState (unit tests on small frames) needs it but does not create it.
    assert session.streams.active == []
    register_sources(session)
    yield session
    session.stop()


@pytest.fixture
def running(spark: Any, tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """Start queries with ``running(settings)``; all are stopped at the end of the test."""
    from headwater.enricher.driver import job

    queries = []

    def start(settings: Any) -> Any:
        q = job.start(spark, settings, str(tmp_path / "stats.jsonl"))
        queries.append(q)
        return q

    yield start
    for q in queries:
        q.stop()


@pytest.fixture
def progress_log(spark: Any) -> Iterator[Any]:
    """Every progress of the queries the test runs (``tests.support.enricher.ProgressLog``)."""
    from tests.support.enricher import ProgressLog

    log = ProgressLog()
    spark.streams.addListener(log.listener)
    yield log
    spark.streams.removeListener(log.listener)
