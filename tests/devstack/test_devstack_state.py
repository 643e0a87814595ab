"""The dev stack owns its state, ``up`` means up, and ``status`` says why a piece exited.

Ownership rules are checked on real folders; the stack's answers to a foreign checkpoint,
to an enricher that cannot start and to a piece that dies are checked against real
``devstack up`` processes (each failure provoked for real: a checkpoint from elsewhere, a
bad enricher setting, SIGKILL). None of them needs Spark to start, so they take seconds.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from headwater_dev.devstack import ownership, status_file
from headwater_dev.devstack.ports import free_port
from headwater_dev.devstack.processes import exit_reason, last_commit, log_tail

CLI = [sys.executable, "-m", "headwater.cli", "devstack"]
UP_WITHIN_S = 120


def devstack(
    *args: str, timeout: float = 60, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, **(env or {})},
    )


def _port_flags() -> list[str]:
    ports = [free_port() for _ in range(4)]
    flags = ["--kafka-port", str(ports[0]), "--grpc-port", str(ports[1])]
    flags += ["--ingest-metrics-port", str(ports[2])]
    return [*flags, "--enricher-metrics-port", str(ports[3])]


@pytest.fixture
def stack_dir(tmp_path: Path):
    """A workdir whose stack is always stopped after the test, even when it fails."""
    workdir = tmp_path / "stack"
    yield workdir
    left = status_file.read(workdir)
    if left is not None and status_file.alive(left.supervisor_pid):
        devstack("down", "--workdir", str(workdir), "--timeout", "30", timeout=90)


def _spark_checkpoint(path: Path, commits: int = 1) -> None:
    """The folders Spark writes (offsets, commits): what ownership looks at."""
    (path / "commits").mkdir(parents=True)
    (path / "offsets").mkdir()
    for batch in range(commits):
        (path / "commits" / str(batch)).write_text("v1\n{}\n")
        (path / "offsets" / str(batch)).write_text("v1\n{}\n")


# -- ownership rules ---------------------------------------------------------------------


def test_a_new_checkpoint_is_recorded_as_this_datas_and_then_reused(tmp_path: Path):
    data = tmp_path / "kafka"
    data.mkdir()
    checkpoint = tmp_path / "checkpoint"
    assert ownership.claim(checkpoint, data) == "new"
    _spark_checkpoint(checkpoint)
    assert ownership.claim(checkpoint, data) == "reused"
    assert (checkpoint / "commits" / "0").exists()


def test_a_checkpoint_of_this_folders_removed_data_is_discarded(tmp_path: Path):
    data = tmp_path / "kafka"
    data.mkdir()
    checkpoint = tmp_path / "checkpoint"
    ownership.claim(checkpoint, data)
    _spark_checkpoint(checkpoint)
    first_id = ownership.data_id(data)
    (data / ownership.DATA_ID_FILE).unlink()  # the data folder was removed and reformatted
    assert ownership.claim(checkpoint, data) == "discarded"
    assert not checkpoint.exists()
    assert ownership.data_id(data) != first_id
    assert ownership.claim(checkpoint, data) == "new"


def test_a_checkpoint_with_no_record_is_refused_with_what_to_do(tmp_path: Path):
    data = tmp_path / "kafka"
    data.mkdir()
    checkpoint = tmp_path / "checkpoint"
    _spark_checkpoint(checkpoint)  # as an earlier `make run` left it beside `up`'s data
    with pytest.raises(ownership.CheckpointMismatchError) as refused:
        ownership.claim(checkpoint, data)
    assert f"rm -rf {checkpoint}" in str(refused.value)
    assert (checkpoint / "commits" / "0").exists()  # refused, not deleted


def test_a_checkpoint_of_another_folders_data_is_refused(tmp_path: Path):
    other, data = tmp_path / "other-kafka", tmp_path / "kafka"
    other.mkdir()
    data.mkdir()
    checkpoint = tmp_path / "checkpoint"
    ownership.claim(checkpoint, other)
    _spark_checkpoint(checkpoint)
    with pytest.raises(ownership.CheckpointMismatchError, match=str(other)):
        ownership.claim(checkpoint, data)


def test_last_commit_ignores_spark_side_files(tmp_path: Path):
    assert last_commit(tmp_path / "none") == -1
    _spark_checkpoint(tmp_path, commits=3)
    (tmp_path / "commits" / ".2.crc").write_text("x")
    assert last_commit(tmp_path) == 2


def test_exit_reason_names_the_signal():
    assert exit_reason(-signal.SIGKILL) == "killed by SIGKILL"
    assert exit_reason(2) == "exited with code 2"


def test_log_tail_keeps_the_last_non_empty_lines(tmp_path: Path):
    log = tmp_path / "x.log"
    log.write_text("".join(f"line {i}\n\n" for i in range(100)))
    assert log_tail(log, 3) == ["line 97", "line 98", "line 99"]
    assert log_tail(tmp_path / "missing.log") == []


# -- the stack's answers -------------------------------------------------------------------


def test_up_refuses_a_checkpoint_of_other_data_and_says_what_to_do(stack_dir: Path):
    _spark_checkpoint(stack_dir / "checkpoint")
    up = devstack("up", "--workdir", str(stack_dir), *_port_flags(), timeout=UP_WITHIN_S + 30)
    assert up.returncode == 1, up.stdout + up.stderr
    assert "does not belong to this broker's data" in up.stdout
    assert f"rm -rf {stack_dir / 'checkpoint'}" in up.stdout
    assert (stack_dir / "checkpoint" / "commits" / "0").exists()
    _wait_supervisor_gone(stack_dir)


def test_up_fails_with_the_reason_and_the_enricher_log_when_the_enricher_exits(
    stack_dir: Path,
):
    up = devstack(
        "up",
        "--workdir",
        str(stack_dir),
        *_port_flags(),
        timeout=UP_WITHIN_S + 30,
        env={"HEADWATER_ENRICHER_MAX_ATTEMPTS": "zero"},
    )
    assert up.returncode == 1, up.stdout + up.stderr
    assert "the enricher exited with code 2" in up.stdout
    assert f"last lines of {stack_dir / 'enricher.log'}:" in up.stdout
    assert "HEADWATER_ENRICHER_MAX_ATTEMPTS='zero' is not an integer" in up.stdout
    _wait_supervisor_gone(stack_dir)
    status = devstack("status", "--workdir", str(stack_dir))
    assert status.returncode == 1 and "the enricher exited with code 2" in status.stdout


def test_status_says_why_a_piece_exited(stack_dir: Path):
    up = devstack(
        "up",
        "--workdir",
        str(stack_dir),
        "--no-enricher",
        *_port_flags(),
        "--wait",
        str(UP_WITHIN_S),
        timeout=UP_WITHIN_S + 30,
    )
    assert up.returncode == 0, up.stdout + up.stderr
    running = status_file.read(stack_dir)
    assert running is not None
    os.kill(running.pids["ingest"], signal.SIGKILL)
    deadline = time.monotonic() + 30
    while "ingest" not in (status_file.read(stack_dir) or running).exited:
        assert time.monotonic() < deadline, "the supervisor did not notice the exit"
        time.sleep(0.5)
    status = devstack("status", "--workdir", str(stack_dir))
    assert status.returncode == 2
    assert "degraded" in status.stdout
    assert f"ingest killed by SIGKILL; last lines of {stack_dir / 'ingest.log'}:" in status.stdout
    as_json = json.loads(devstack("status", "--workdir", str(stack_dir), "--json").stdout)
    assert as_json["pieces"]["ingest"] == "exited"
    assert as_json["exited"]["ingest"]["reason"] == "killed by SIGKILL"
    assert as_json["exited"]["ingest"]["log"]  # the ingest service logged its start


def _wait_supervisor_gone(workdir: Path, within_s: float = 60) -> None:
    """A failed start stops what it started: the supervisor exits by itself."""
    current = status_file.read(workdir)
    assert current is not None and current.status == "failed"
    deadline = time.monotonic() + within_s
    while status_file.alive(current.supervisor_pid):
        assert time.monotonic() < deadline, "the supervisor of a failed start kept running"
        time.sleep(0.5)
