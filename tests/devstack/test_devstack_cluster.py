"""``--brokers 3``: the dev stack on a three-node cluster with production's replication.

The argument checks and the status file's bootstrap list run in the default suite; the
background stack on a real cluster (marker ``cluster``) is started, checked node by node,
failed on purpose with ``headwater chaos`` (a dry run changes nothing; a killed leader
and a rolling restart are replaced by the supervisor) and stopped, without Spark. And
``devstack run --brokers 3`` with the enricher through each fault ``--chaos`` provokes (a
leader killed, a rolling restart of every node): every guarantee of the summary holds.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from headwater.topics import INGEST_TOPICS
from headwater_dev.devstack import status_file
from headwater_dev.devstack.broker import EmbeddedBroker
from headwater_dev.devstack.cluster import BrokerCluster, broker_pids, dev_kafka
from headwater_dev.devstack.ports import free_port
from tests.devstack.test_devstack_state import UP_WITHIN_S, devstack, stack_dir  # noqa: F401


@pytest.mark.parametrize("count", ["2", "4", "0", "11", "three"])
def test_brokers_is_one_or_an_odd_quorum(count: str) -> None:
    done = devstack("run", "--brokers", count)
    assert done.returncode == 2
    assert f"1, or an odd number from 3 to 9, not '{count}'" in done.stderr


@pytest.mark.parametrize(("chaos", "said"), [("", "--chaos leader"), ("roll", "--chaos roll")])
def test_chaos_needs_a_cluster(chaos: str, said: str) -> None:
    done = devstack("run", "--chaos", *([chaos] if chaos else []))
    assert done.returncode == 2
    assert f"{said} fails brokers: it needs a cluster that survives it" in done.stdout


def test_chaos_is_a_leader_kill_or_a_roll() -> None:
    done = devstack("run", "--brokers", "3", "--chaos", "upgrade")
    assert done.returncode == 2
    assert "invalid choice: 'upgrade' (choose from 'leader', 'roll')" in done.stderr


def test_one_broker_stays_as_it_was_and_a_cluster_takes_the_next_ports(tmp_path: Path) -> None:
    single = dev_kafka(1, 19092, tmp_path, tmp_path / "kafka")
    assert isinstance(single, EmbeddedBroker)
    assert single.log_path == tmp_path / "broker.log"
    assert single.data_dir == tmp_path / "kafka"
    cluster = dev_kafka(3, 19092, tmp_path, tmp_path / "kafka-3-nodes")
    assert isinstance(cluster, BrokerCluster)
    assert cluster.bootstrap_servers == "127.0.0.1:19092,127.0.0.1:19093,127.0.0.1:19094"
    assert [n.log_path.name for n in cluster.nodes] == [f"broker-{i}.log" for i in (1, 2, 3)]
    assert broker_pids(cluster) == {}  # nothing started


def test_the_status_file_lists_every_node() -> None:
    state = status_file.StackState(1, "/w", {"kafka": 9092}, False, "t", "g", "d", brokers=3)
    assert state.bootstrap_servers == "127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094"


def _three_free_ports() -> int:
    """A port whose next two are free too (a cluster's nodes listen on them)."""
    for _ in range(50):
        first = free_port()
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", first + 1))
                b.bind(("127.0.0.1", first + 2))
        except OSError:
            continue
        return first
    raise AssertionError("no three consecutive free ports on 127.0.0.1")


@pytest.mark.cluster
def test_up_with_three_brokers_runs_a_replicated_cluster(stack_dir: Path) -> None:  # noqa: F811
    kafka = _three_free_ports()
    flags = ["--kafka-port", str(kafka), "--grpc-port", str(free_port())]
    flags += ["--ingest-metrics-port", str(free_port())]
    up = devstack(
        "up",
        "--workdir",
        str(stack_dir),
        "--no-enricher",
        "--brokers",
        "3",
        *flags,
        "--wait",
        str(UP_WITHIN_S * 2),
        timeout=UP_WITHIN_S * 2 + 30,
    )
    assert up.returncode == 0, up.stdout + up.stderr
    bootstrap = ",".join(f"127.0.0.1:{kafka + i}" for i in range(3))
    assert bootstrap in up.stdout  # what to connect to: every node
    status = devstack("status", "--workdir", str(stack_dir))
    assert status.returncode == 0, status.stdout
    for node in (1, 2, 3):
        assert f"broker-{node}" in status.stdout
    meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    assert len(meta.brokers) == 3
    for topic in INGEST_TOPICS.values():
        assert all(len(p.replicas) == 3 for p in meta.topics[topic].partitions.values())
    assert (stack_dir / "kafka-3-nodes" / "node-3").is_dir()
    _chaos_against(stack_dir)
    down = devstack("down", "--workdir", str(stack_dir), timeout=200)
    assert down.returncode == 0, down.stdout
    left = subprocess.run(["pgrep", "-f", str(stack_dir)], capture_output=True, check=False)
    assert left.stdout == b"", "a node outlived the stack"


def _chaos(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "headwater.cli", "chaos", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _wait_status_up(workdir: Path, within_s: float = 180) -> None:
    deadline = time.monotonic() + within_s
    while devstack("status", "--workdir", str(workdir)).returncode != 0:
        assert time.monotonic() < deadline, "the stack did not come back up"
        time.sleep(2)


def _chaos_against(workdir: Path) -> None:
    before = status_file.read(workdir)
    assert before is not None
    topic = INGEST_TOPICS["telemetry"]
    dry = _chaos("kill-broker", "--leader-of", topic, "--workdir", str(workdir))
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert "dry run, would do: SIGKILL Kafka node" in dry.stdout
    assert "add --execute" in dry.stdout
    assert status_file.read(workdir).pids == before.pids  # nothing was done

    kill = _chaos("kill-broker", "--leader-of", topic, "--workdir", str(workdir), "--execute")
    assert kill.returncode == 0, kill.stdout + kill.stderr
    node = kill.stdout.split("SIGKILL Kafka node ")[1].split()[0]
    deadline = time.monotonic() + 60
    while status_file.read(workdir).pids[f"broker-{node}"] == before.pids[f"broker-{node}"]:
        assert time.monotonic() < deadline, "the supervisor did not start the node again"
        time.sleep(1)
    _wait_status_up(workdir)

    roll = _chaos("roll-brokers", "--workdir", str(workdir), "--execute", timeout=900)
    assert roll.returncode == 0, roll.stdout + roll.stderr
    for n in (1, 2, 3):
        assert f"node {n} restarted and in sync after" in roll.stdout
    print(roll.stdout)


@pytest.mark.cluster
@pytest.mark.spark
@pytest.mark.timeout(900)
def test_run_with_three_brokers_and_a_leader_killed_holds_every_guarantee(tmp_path: Path) -> None:
    # What `make run ARGS="--brokers 3 --chaos"` shows a new user: the whole pipeline, the
    # enricher included, with the telemetry leader SIGKILLed halfway through the traffic
    # (`run` picks a free port for each node).
    summary = _run_three_brokers(tmp_path, "--chaos", "--duration", "40")
    fault = summary["kafka"]["fault"]
    assert fault["leader_of"] == "ingest.telemetry.v1[0]" and fault["new_leader_after_s"] > 0
    assert summary["acked"] > 0 and summary["acked_but_missing_in_kafka"] == 0
    assert summary["enricher"]["messages_without_terminal_completion"] == 0
    assert summary["enricher"]["messages_with_two_different_outcomes"] == 0
    assert summary["enricher"]["completions"]["ENRICHED"] > 0
    assert fault["kind"] == "leader"
    assert {"p99_before_ms", "p99_back_under_2s_s"} <= fault.keys()
    print(f"\nrun --brokers 3 --chaos: {fault}, acked {summary['acked']}")


@pytest.mark.cluster
@pytest.mark.spark
@pytest.mark.timeout(900)
def test_run_through_a_rolling_restart_of_the_brokers_holds_every_guarantee(
    tmp_path: Path,
) -> None:
    # `make run ARGS="--brokers 3 --chaos roll"`: every node restarted in turn (SIGTERM, the
    # next once all is in sync) 10 s after the 20 s warm-up, the enricher included in the
    # run. 100 s of traffic (the run's default with a roll is 150 s): the roll took 52 s here.
    summary = _run_three_brokers(tmp_path, "--chaos", "roll", "--duration", "100")
    fault = summary["kafka"]["fault"]
    assert fault["kind"] == "roll" and fault["rolled_nodes"] == [1, 2, 3]
    assert len(fault["per_node_s"]) == 3
    assert {"p99_before_ms", "p99_back_under_2s_s"} <= fault.keys()
    assert summary["acked"] > 0 and summary["acked_but_missing_in_kafka"] == 0
    enricher = summary["enricher"]
    assert enricher["messages_without_terminal_completion"] == 0
    assert enricher["messages_with_two_different_outcomes"] == 0
    assert enricher["completions"]["ENRICHED"] > 0
    print(f"\nrun --brokers 3 --chaos roll: {fault}, acked {summary['acked']}, {enricher}")


def _run_three_brokers(tmp_path: Path, *args: str) -> dict[str, Any]:
    """``devstack run --brokers 3`` with ``args`` (a free port for each node); its summary."""
    command = ["devstack", "run", "--brokers", "3", *args, "--json"]
    run = subprocess.run(
        [sys.executable, "-m", "headwater.cli", *command, "--workdir", str(tmp_path / "stack")],
        capture_output=True,
        text=True,
        timeout=840,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    summary: dict[str, Any] = json.loads(run.stdout.strip().splitlines()[-1])
    return summary
