"""The scale benchmark's own parts (``headwater bench enricher scale``): figures and verdicts."""

from __future__ import annotations

import json
import os
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest

from headwater import record_headers as rh
from headwater_dev.bench.enricher import scale, scale_fleet, scale_probes


def _batch(rows: int, commit_ms: int, trigger_ms: int, memory: int = 0) -> str:
    return json.dumps(
        {
            "numInputRows": rows,
            "durationMs": {"triggerExecution": trigger_ms, "commitOffsets": 3, "walCommit": 4},
            "stateOperators": [{"commitTimeMs": commit_ms, "memoryUsedBytes": memory}],
        }
    )


def test_the_commit_profile_is_the_median_batch_with_rows() -> None:
    progress = [_batch(0, 900, 10), _batch(100, 20, 400), _batch(300, 40, 600, 2 << 20)]
    progress.append(_batch(200, 30, 500, 3 << 20))
    got = scale_probes.commit_profile(progress)
    assert got["batches"] == 3  # the empty batch (timers only) is not one
    assert got["state_commit_ms"] == 30
    assert got["state_commit_ms_max"] == 40
    assert got["rows_per_batch"] == 200
    assert got["trigger_ms"] == 500
    assert (got["commit_offsets_ms"], got["wal_commit_ms"]) == (3, 4)
    assert got["state_memory_mib"] == 3.0  # the last batch's
    assert scale_probes.commit_profile([_batch(0, 1, 1)]) == {}


def _snapshot(folder: Path, version: int, sst_sizes: list[int]) -> int:
    """Write a RocksDB snapshot as Spark does: a zip with a metadata entry naming its SSTs."""
    folder.mkdir(parents=True, exist_ok=True)
    metadata = {
        "sstFiles": [
            {"dfsSstFileName": f"{i}.sst", "sizeBytes": n} for i, n in enumerate(sst_sizes)
        ],
        "numKeys": -1,
    }
    with zipfile.ZipFile(folder / f"{version}.zip", "w") as z:
        z.writestr("metadata", "v1\n" + json.dumps(metadata))
    return (folder / f"{version}.zip").stat().st_size + sum(sst_sizes)


def test_the_newest_snapshot_of_each_partition_is_counted_with_its_sst_files(
    tmp_path: Path,
) -> None:
    _snapshot(tmp_path / "0" / "0", 9, [1000])
    newest = _snapshot(tmp_path / "0" / "0", 19, [300, 200])
    (tmp_path / "0" / "0" / "20.changelog").write_bytes(b"x" * 50)
    (tmp_path / "0" / "1").mkdir()  # a partition without a snapshot yet
    assert scale_probes.newest_snapshots_bytes(tmp_path) == newest
    assert scale_probes.dir_bytes(tmp_path / "0" / "1") == 0
    assert scale_probes.dir_bytes(tmp_path / "absent") == 0
    (tmp_path / "0" / "1" / "a").write_bytes(b"x" * 7)
    assert scale_probes.dir_bytes(tmp_path / "0" / "1") == 7


def test_only_the_rocksdb_folders_of_this_query_are_counted(tmp_path: Path) -> None:
    old = tmp_path / "spark-1" / "StateStoreId(opId=0,partId=0,name=default)-a"
    new = tmp_path / "spark-1" / "StateStoreId(opId=0,partId=1,name=default)-b"
    for folder, size in ((old, 1000), (new, 10)):
        folder.mkdir(parents=True)
        (folder / "000001.sst").write_bytes(b"x" * size)
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    assert scale_probes.rocksdb_local_bytes(tmp_path, time.time() - 60) == 10


def test_the_resident_set_of_a_process_is_read_and_of_a_gone_one_is_zero() -> None:
    mine = scale_probes.rss_mib(os.getpid())
    assert 0 < mine["rss_mib"] <= mine["peak_rss_mib"]
    assert scale_probes.rss_mib(2**22 + 1) == {"rss_mib": 0.0, "peak_rss_mib": 0.0}


def _fleet(devices: int, rate: int, **extra: Any) -> dict[str, Any]:
    return {
        "devices": devices,
        "enricher_events_per_s": rate,
        "latency_ms_p99": 2500,
        "checkpoint_state_bytes_per_device": 900.0,
        "rocksdb_local_bytes_per_device": 300.0,
        "newest_snapshots_bytes_per_device": 200.0,
        "populate_process_s": 10.0,
        "memory_drain": {"jvm_peak_rss_mib": 1000.0},
        **extra,
    }


def test_targets_judge_each_large_fleet_against_the_baseline_of_the_same_run() -> None:
    baseline = _fleet(1000, 10_000)
    lines = scale.check_targets(
        baseline,
        [
            _fleet(100_000, 7_000, restart_to_caught_up_s=59.0),
            _fleet(200_000, 6_999, latency_ms_p99=3001, checkpoint_state_bytes_per_device=1025.0),
        ],
    )
    assert lines == [
        "100000 devices, sustained msg/s as a share of the baseline fleet's: 0.7 (>= 0.7) met",
        "100000 devices, p99 ms at the offered rate: 2500 (<= 3000) met",
        "100000 devices, state bytes per device in the checkpoint: 900.0 (<= 1024) met",
        "100000 devices, driver restart to caught up, seconds: 59.0 (<= 60) met",
        "200000 devices, sustained msg/s as a share of the baseline fleet's: 0.7 (>= 0.7) MISSED",
        "200000 devices, p99 ms at the offered rate: 3001 (<= 3000) MISSED",
        "200000 devices, state bytes per device in the checkpoint: 1025.0 (<= 1024) MISSED",
    ]  # no restart measured for the second fleet: no line for it


def test_a_projection_keeps_bytes_per_device_and_extends_the_line_of_the_rest() -> None:
    baseline = _fleet(1000, 10_000)
    largest = _fleet(101_000, 9_000, restart_to_caught_up_s=30.0)
    largest["memory_drain"] = {"jvm_peak_rss_mib": 1100.0}
    got = scale.project(baseline, largest, 1_001_000)
    assert got["projected_from"] == 101_000
    assert got["checkpoint_state_bytes_per_device"] == 900.0
    assert got["checkpoint_state_bytes_total_mib"] == round(900 * 1_001_000 / 2**20)
    assert got["jvm_peak_rss_mib"] == 2000.0  # +100 MiB per 100,000 devices
    assert "restart_to_caught_up_s" not in got  # not projected: mostly the JVM's start
    assert got["populate_process_s"] == round(10 * 1_001_000 / 101_000)


def test_the_run_stops_when_its_time_bound_passes() -> None:
    clock = scale_fleet.Clock(time.monotonic() + 30)
    assert 0 < clock.left(5) <= 5
    assert clock.left(3600) <= 30
    with pytest.raises(scale_fleet.OutOfTime):
        scale_fleet.Clock(time.monotonic() - 1).left(5)


def test_random_devices_of_the_fleet_with_ids_of_their_own() -> None:
    keys = set()
    for i in range(200):
        key, _, headers = scale_fleet.scattered_record(1000 + i, 50, "run", 0)
        keys.add(key)
        assert dict(headers)[rh.MESSAGE_ID] != f"run-{1000 + i}".encode()
    assert len(keys) > 20 and all(int(k.split(b"-")[1]) < 50 for k in keys)


@pytest.mark.parametrize(
    "argv", [["--devices", "1000"], ["--messages", "30000", "--batch-records", "10000"]]
)
def test_bad_arguments_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """Fleets no larger than the baseline, or a drain of fewer than ten batches, are refused."""
    from headwater_dev.bench.enricher.query import main

    with pytest.raises(SystemExit) as exc:
        main(["scale", *argv])
    assert exc.value.code == 2
    assert "must" in capsys.readouterr().err


class _Progress:
    def __init__(self, batch_id: int, rows: int) -> None:
        self.json = json.dumps({"batchId": batch_id, "numInputRows": rows})


def test_rows_are_committed_once_an_empty_batch_followed_the_last_with_rows() -> None:
    assert scale_fleet.rows_committed([_Progress(4, 10), _Progress(5, 0)])
    assert not scale_fleet.rows_committed([_Progress(4, 0), _Progress(5, 10)])
    assert not scale_fleet.rows_committed([_Progress(5, 10)])
    assert not scale_fleet.rows_committed([])


def test_a_fleet_stopped_by_the_time_bound_is_judged_on_what_it_measured() -> None:
    stopped = {"devices": 1_000_000, "stopped": "the run's time bound", "latency_ms_p99": 2000}
    assert scale.check_targets(_fleet(1000, 10_000), [stopped]) == [
        "1000000 devices, p99 ms at the offered rate: 2000 (<= 3000) met"
    ]
