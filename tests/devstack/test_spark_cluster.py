"""``--spark-workers``: the dev stack's enricher on a Spark standalone cluster, and
``headwater chaos kill-executor``.

The arguments, the bookkeeping and chaos's refusals are cheap checks in the default suite
(nothing started). The background stack on a real cluster (marker ``cluster``) is started,
loses an executor through ``headwater chaos`` (a dry run changes nothing) and is stopped.
What the enricher promises across a lost executor is tests/enricher/test_executor_faults.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from headwater_dev.devstack import status_file
from headwater_dev.devstack.ports import free_port
from headwater_dev.devstack.processes import log_tail
from headwater_dev.devstack.spark_cluster import (
    EXECUTOR_MEMORY,
    SparkClusterError,
    SparkStandalone,
    executors_of,
)
from tests.devstack.test_devstack_state import devstack, stack_dir  # noqa: F401

#: A stack with Spark on a loaded two-core machine: the cluster, then the enricher's first batch.
START_S = 420


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


def _chaos(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "headwater.cli", "chaos", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_kill_executor_refuses_without_a_stack(tmp_path: Path) -> None:
    done = _chaos("kill-executor", "--workdir", str(tmp_path), "--execute")
    assert done.returncode == 2
    assert "no dev stack runs in" in done.stdout
    assert "headwater devstack up --spark-workers 2" in done.stdout


def test_kill_executor_refuses_a_stack_in_local_mode(tmp_path: Path) -> None:
    # A running stack (its supervisor: this process) whose enricher has no Spark worker.
    state = status_file.StackState(
        os.getpid(), str(tmp_path), {"kafka": 9092}, True, "t", "g", "d", pids={"enricher": 1}
    )
    status_file.write(tmp_path, state)
    done = _chaos("kill-executor", "--workdir", str(tmp_path), "--execute")
    assert done.returncode == 2
    assert "runs no Spark worker" in done.stdout
    assert "local mode" in done.stdout


@pytest.mark.cluster
@pytest.mark.timeout(900)  # bounded by START_S twice; more than the suite's 300 s
def test_up_with_spark_workers_loses_an_executor_and_goes_on(stack_dir: Path) -> None:  # noqa: F811
    flags = ["--kafka-port", str(free_port()), "--grpc-port", str(free_port())]
    flags += ["--ingest-metrics-port", str(free_port())]
    flags += ["--enricher-metrics-port", str(free_port())]
    up = devstack(
        *("up", "--workdir", str(stack_dir), "--spark-workers", "2", *flags),
        *("--wait", str(START_S)),
        timeout=START_S + 30,
    )
    assert up.returncode == 0, (
        up.stdout + up.stderr + "".join(log_tail(stack_dir / "supervisor.log"))
    )
    status = devstack("status", "--workdir", str(stack_dir))
    assert status.returncode == 0, status.stdout
    for daemon in ("spark-master", "spark-worker-1", "spark-worker-2"):
        assert daemon in status.stdout
    before = status_file.read(stack_dir)
    assert before is not None
    worker = before.pids["spark-worker-1"]
    deadline = time.monotonic() + START_S
    while not executors_of(worker):
        assert time.monotonic() < deadline, "worker 1 never ran an executor"
        time.sleep(1)
    (executor,) = executors_of(worker)

    dry = _chaos("kill-executor", "--worker", "1", "--workdir", str(stack_dir))
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert f"dry run, would do: SIGKILL the executor JVM of Spark worker 1 (pid {executor})" in (
        dry.stdout
    )
    assert executors_of(worker) == [executor]  # nothing was done

    kill = _chaos("kill-executor", "--worker", "1", "--workdir", str(stack_dir), "--execute")
    assert kill.returncode == 0, kill.stdout + kill.stderr
    assert f"killed executor pid {executor}" in kill.stdout
    started = time.monotonic()
    while executors_of(worker) in ([], [executor]):  # the worker launches another
        assert time.monotonic() - started < START_S, "worker 1 launched no new executor"
        time.sleep(1)
    replaced_s = time.monotonic() - started
    # The enricher (the driver) lived through it: its query goes on, status says up.
    assert devstack("status", "--workdir", str(stack_dir)).returncode == 0
    print(f"\nchaos kill-executor: a new executor on worker 1 after {replaced_s:.1f}s")
    down = devstack("down", "--workdir", str(stack_dir), timeout=200)
    assert down.returncode == 0, down.stdout
    left = subprocess.run(["pgrep", "-f", str(stack_dir)], capture_output=True, check=False)
    assert left.stdout == b"", "a Spark daemon or executor outlived the stack"
