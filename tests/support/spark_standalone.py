"""A Spark standalone cluster (a master, two workers) for the executor faults (marker ``cluster``).

The suite's enricher tests run Spark's local mode (one JVM, fixture ``spark``): fast, and
enough for every guarantee that needs no lost process. Only a test that kills an executor,
a worker or the driver asks for this cluster, where the keyed state lives in executors and
moves between them (tests/enricher/test_executor_faults.py). Registered for the whole suite
by ``pytest_plugins`` in tests/conftest.py.

- ``spark_standalone``: a master and two one-core workers on loopback, started for the
  test and stopped after it (with every executor they launched).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from headwater_dev.devstack.spark_cluster import SparkStandalone


@pytest.fixture
def spark_standalone(tmp_path: Path) -> Iterator[SparkStandalone]:
    """A Spark master and two workers (1 core each) on 127.0.0.1; logs kept in tmp_path."""
    with SparkStandalone(workers=2, base_dir=tmp_path / "spark", log_dir=tmp_path) as cluster:
        yield cluster
