"""Moving the enricher checkpoint's starting point, on a checkpoint in Spark's layout."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from headwater.ops.checkpoint import CheckpointError, read_checkpoint, set_start

META = json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 1, "conf": {}})


def write_batch(root, batch, *sources, committed=True):
    (root / "offsets").mkdir(parents=True, exist_ok=True)
    (root / "commits").mkdir(parents=True, exist_ok=True)
    (root / "offsets" / str(batch)).write_text("\n".join(["v1", META, *map(json.dumps, sources)]))
    (root / "offsets" / f".{batch}.crc").write_bytes(b"crc")
    if committed:
        (root / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')


@pytest.fixture
def checkpoint(tmp_path):
    root = tmp_path / "cp"
    write_batch(root, 0, {"ingest.telemetry.v1": {"0": 5, "1": 7}}, {"master.devices.v1": {"0": 3}})
    write_batch(root, 1, {"ingest.telemetry.v1": {"0": 9, "1": 8}}, {"master.devices.v1": {"0": 3}})
    write_batch(
        root,
        2,
        {"ingest.telemetry.v1": {"0": 12, "1": 9}},
        {"master.devices.v1": {"0": 3}},
        committed=False,
    )
    return root


def test_show_reads_the_last_committed_batch(checkpoint):
    view = read_checkpoint(checkpoint)
    assert (view.last_committed, view.last_planned) == (1, 2)
    rows = {(r["topic"], r["partition"]): r["next_offset"] for r in view.rows()}
    assert rows == {
        ("ingest.telemetry.v1", 0): 9,
        ("ingest.telemetry.v1", 1): 8,
        ("master.devices.v1", 0): 3,
    }


def test_set_start_moves_only_the_named_partitions_and_keeps_a_backup(checkpoint):
    view, backup = set_start(checkpoint, {("ingest.telemetry.v1", 1): 500})
    rows = {(r["topic"], r["partition"]): r["next_offset"] for r in view.rows()}
    assert rows[("ingest.telemetry.v1", 1)] == 500 and rows[("ingest.telemetry.v1", 0)] == 9
    assert view.last_planned == 1, "the uncommitted batch is set aside, to be planned afresh"
    assert (backup / "offsets-1").exists() and (backup / "offsets-2").exists()
    assert not (checkpoint / "offsets" / ".1.crc").exists()
    assert (checkpoint / "offsets" / "1").read_text().splitlines()[0] == "v1"


def test_set_start_refuses_unknown_partitions(checkpoint):
    with pytest.raises(CheckpointError, match="has no offsets for"):
        set_start(checkpoint, {("ingest.alarms.v1", 0): 1})


def test_cli_is_a_dry_run_unless_executed(checkpoint):
    base = [sys.executable, "-m", "headwater.cli", "offsets", "checkpoint"]
    args = ["--checkpoint", str(checkpoint), "--topic", "ingest.telemetry.v1", "--partition", "0"]
    dry = subprocess.run(
        [*base, "set-start", *args, "--offset", "77"], capture_output=True, text=True, timeout=60
    )
    assert dry.returncode == 0 and "dry run" in dry.stderr
    assert read_checkpoint(checkpoint).sources[0].offsets["ingest.telemetry.v1"]["0"] == 9
    done = subprocess.run(
        [*base, "set-start", *args, "--offset", "77", "--execute"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert read_checkpoint(checkpoint).sources[0].offsets["ingest.telemetry.v1"]["0"] == 77
    shown = subprocess.run(
        [*base, "show", "--checkpoint", str(checkpoint), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert {
        "topic": "ingest.telemetry.v1",
        "partition": 0,
        "next_offset": 77,
        "batch": 1,
        "source": 0,
    } in [json.loads(line) for line in shown.stdout.splitlines()]
