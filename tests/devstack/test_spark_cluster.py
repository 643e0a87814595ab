"""``--spark-workers``: the Spark standalone cluster's arguments and its bookkeeping.

Cheap checks, nothing started: the cluster itself runs in the executor faults (marker
``cluster``, tests/enricher/test_executor_faults.py), which start it, run the enricher on
it and kill its executors.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from headwater_dev.devstack.spark_cluster import (
    EXECUTOR_MEMORY,
    SparkClusterError,
    SparkStandalone,
)
from tests.devstack.test_devstack_state import devstack


@pytest.mark.parametrize("count", ["-1", "5", "two"])
def test_spark_workers_is_a_small_count(count: str) -> None:
    done = devstack("run", "--spark-workers", count)
    assert done.returncode == 2
    assert f"a number of workers from 0 to 4, not '{count}'" in done.stderr


def test_a_cluster_has_a_worker_at_least(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least one worker, not 0"):
        SparkStandalone(0, base_dir=tmp_path)


def test_the_driver_is_pointed_at_the_master_with_small_executors(tmp_path: Path) -> None:
    cluster = SparkStandalone(2, base_dir=tmp_path, port=17077)
    env = cluster.driver_env()
    assert env["HEADWATER_ENRICHER_SPARK_MASTER"] == "spark://127.0.0.1:17077"
    assert env["SPARK_LOCAL_IP"] == "127.0.0.1"
    submit = env["PYSPARK_SUBMIT_ARGS"].split()
    assert submit[-1] == "pyspark-shell"  # what pyspark appends itself when unset
    assert f"spark.executor.memory={EXECUTOR_MEMORY}" in submit
    assert "spark.executor.cores=1" in submit
    assert [w.name for w in cluster.workers] == ["worker-1", "worker-2"]


def test_no_executor_to_kill_on_a_worker_not_started(tmp_path: Path) -> None:
    cluster = SparkStandalone(1, base_dir=tmp_path)
    assert cluster.executor_pids(1) == []
    with pytest.raises(SparkClusterError, match="worker 1 runs no executor"):
        cluster.kill_executor(1)
    assert cluster.alive_workers() == 0  # no master answers
