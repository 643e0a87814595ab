"""What the scale benchmark reads off the machine: bytes on disk, resident memory, commit times."""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path
from typing import Any

from headwater.enricher.driver.metrics import percentile
from headwater_dev.bench.enricher import cpu as bench_cpu


def dir_bytes(path: str | Path) -> int:
    """Return the bytes of every file under ``path`` (0 when it is not there)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:  # removed meanwhile (RocksDB's own maintenance)
                continue
    return total


def newest_snapshots_bytes(state_dir: str | Path) -> int:
    """Return the bytes of the newest RocksDB snapshot of every partition, its SST files included.

    One complete copy of the state: what a restart loads before replaying the changelogs
    after it. A snapshot is ``<version>.zip`` (RocksDB's metadata) and the SST files its
    ``metadata`` entry names (kept once, under ``SSTs/``, for every snapshot that shares them).
    0 when no snapshot was made yet (they are made in the background).
    """
    total = 0
    for partition in Path(state_dir).glob("*/*"):
        zips = [p for p in partition.glob("*.zip") if p.stem.split("_")[0].isdigit()]
        if not zips:
            continue
        newest = max(zips, key=lambda p: int(p.stem.split("_")[0]))
        with zipfile.ZipFile(newest) as z:
            # "v1", then one JSON line: {"sstFiles": [{"sizeBytes": ...}, ...], ...}
            metadata = json.loads(z.read("metadata").decode().split("\n", 1)[1])
        total += newest.stat().st_size + sum(f["sizeBytes"] for f in metadata["sstFiles"])
    return total


def rocksdb_local_bytes(local_dir: str | Path, since: float) -> int:
    """Return the bytes of the RocksDB working folders created under ``local_dir`` since ``since``.

    Spark opens each state store in a temporary folder named after its ``StateStoreId``;
    ``since`` (epoch seconds) leaves out the folders of earlier queries not yet closed.
    """
    total = 0
    for d in Path(local_dir).glob("**/StateStoreId*"):
        if d.is_dir() and d.stat().st_mtime >= since - 1:
            total += dir_bytes(d)
    return total


def rss_mib(pid: int) -> dict[str, float]:
    """Return the resident set of ``pid`` now and at its peak, in MiB (``/proc``)."""
    out = {"rss_mib": 0.0, "peak_rss_mib": 0.0}
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return out
    for line in status.splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            name = "rss_mib" if key == "VmRSS" else "peak_rss_mib"
            out[name] = round(int(value.split()[0]) / 1024, 1)
    return out


def memory(jvm_pid: int) -> dict[str, float]:
    """Return the resident memory of the Spark JVM and of its Python workers, in MiB."""
    jvm = rss_mib(jvm_pid)
    workers = [
        p for p, (part, _) in bench_cpu.snapshot(jvm_pid).items() if part == "python_workers"
    ]
    return {
        "jvm_rss_mib": jvm["rss_mib"],
        "jvm_peak_rss_mib": jvm["peak_rss_mib"],
        "python_workers_rss_mib": round(sum(rss_mib(p)["rss_mib"] for p in workers), 1),
    }


def commit_profile(progress_json: list[str]) -> dict[str, float]:
    """Return the median batch's commit figures, over the batches with input rows.

    ``state_commit_ms``: the state store's commit (``stateOperators[].commitTimeMs``, the
    changelog written to the checkpoint); ``commit_offsets_ms`` and ``wal_commit_ms``: the
    query's offset and commit logs; ``trigger_ms``: the whole batch. ``state_memory_mib``:
    the stores' memory (RocksDB's block cache and memtables) at the last batch.
    """
    batches = [json.loads(p) for p in progress_json]
    batches = [b for b in batches if b.get("numInputRows", 0) > 0]
    if not batches:
        return {}

    def median(values: list[float]) -> float:
        return round(percentile(values, 0.5), 1)

    def ops(b: dict[str, Any], key: str) -> float:
        return float(sum(o.get(key, 0) for o in b.get("stateOperators", [])))

    return {
        "batches": len(batches),
        "rows_per_batch": median([b["numInputRows"] for b in batches]),
        "state_commit_ms": median([ops(b, "commitTimeMs") for b in batches]),
        "state_commit_ms_max": max(ops(b, "commitTimeMs") for b in batches),
        "commit_offsets_ms": median([b["durationMs"].get("commitOffsets", 0) for b in batches]),
        "wal_commit_ms": median([b["durationMs"].get("walCommit", 0) for b in batches]),
        "trigger_ms": median([b["durationMs"].get("triggerExecution", 0) for b in batches]),
        "state_memory_mib": round(ops(batches[-1], "memoryUsedBytes") / 2**20, 1),
    }
