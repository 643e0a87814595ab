"""Benchmark: the enricher with many devices in its keyed state (issue 40, "a million devices").

``headwater bench enricher scale --devices 100000`` starts an embedded broker (or uses
``--bootstrap-servers``) and one local Spark session, and for the baseline fleet
(``--baseline-devices``, 1,000) and then each ``--devices`` fleet, on one checkpoint:

1. populate: master data for every device and one message each, written to Kafka, then
   processed back to back in batches of ``--populate-batch-records``: every device has a
   state value (RocksDB, the enricher's session settings: changelog checkpointing, the
   7-day dedup horizon);
2. offered: records of random devices of the fleet at ``--rate`` msg/s, ``--warmup-seconds``
   not measured, then ``--seconds`` measured: ingest received-at to completion visible,
   p50/p99, and each batch's commit time from the query's progress;
3. drain: the query stops, ``--messages`` records of the fleet are written, and the query,
   restarted from its checkpoint, drains them back to back: sustained msg/s is
   ``query.steady_rate`` of its batches;
4. state: bytes per device in the checkpoint's ``state`` folder (every retained version)
   and in its newest snapshots, and in the RocksDB working folders on local disk;
5. restart (not for the baseline): ``headwater enricher run`` on the same checkpoint,
   caught up, is killed (SIGKILL, driver and JVM); a backlog of ``--restart-backlog-seconds``
   at ``--rate`` is written, and the time from starting it again to that backlog's last
   completion is measured.

Memory: resident set (now and peak) of the Spark JVM (driver and executor in one, local
mode) and of the Python workers. One JSON line per fleet, then each target of issue 40 with
met/missed, and for the fleets not measured (``--project-to``) a projection from the largest
fleet's per-device figures, marked as one. Numbers, not assertions: this is not a test.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from headwater.enricher.driver.metrics import percentile
from headwater.enricher.driver.settings import EnricherSettings
from headwater.enricher.topics import EnricherTopics
from headwater.errors import HeadwaterError
from headwater.kafka.admin import ensure_topics
from headwater.kafka.settings import KafkaSettings
from headwater.topics import TopicSpec
from headwater_dev.bench.enricher import cpu as bench_cpu
from headwater_dev.bench.enricher import query as bench_query

#: Issue 40's targets for a large fleet: (figure, comparison, bound, label).
TARGETS = (
    ("share_of_baseline_rate", ">=", 0.70, "sustained msg/s as a share of the baseline fleet's"),
    ("latency_ms_p99", "<=", 3000, "p99 ms at the offered rate"),
    ("checkpoint_state_bytes_per_device", "<=", 1024, "state bytes per device in the checkpoint"),
    ("restart_to_caught_up_s", "<=", 60, "driver restart to caught up, seconds"),
)


class OutOfTime(HeadwaterError, RuntimeError):
    """The run's time bound (``--max-minutes``) passed."""


@dataclasses.dataclass
class Clock:
    """The run's deadline: every wait is bounded by what is left of it."""

    deadline: float

    def left(self, at_most: float) -> float:
        """Return the seconds a wait may take: ``at_most``, or less near the deadline."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise OutOfTime("the run's time bound (--max-minutes) passed")
        return min(at_most, left)


def scattered_record(i: int, devices: int, run: str, received_ms: int) -> tuple[bytes, bytes, Any]:
    """Return record ``i`` of an offered phase: a random device's, as ingest writes it.

    ``query.telemetry_record`` numbers devices round robin; at 1,000,000 devices and
    5,000 msg/s that would walk the key space in order, so the state's reads and writes
    would meet neighbouring keys. Random devices are the worst case and the usual one.
    """
    # Message ids of their own ("o"): never those of the round-robin backlogs' records.
    return bench_query.telemetry_record(
        random.randrange(devices) + devices * i, devices, run + "o", received_ms
    )


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


@dataclasses.dataclass
class Fleet:
    """One fleet's query: its topics, checkpoint and settings, and the run's shared parts."""

    spark: Any
    bootstrap: str
    devices: int
    work: Path
    args: argparse.Namespace
    clock: Clock
    prefix: str = dataclasses.field(init=False)
    topics: EnricherTopics = dataclasses.field(init=False)
    settings: EnricherSettings = dataclasses.field(init=False)
    run: str = dataclasses.field(default_factory=lambda: uuid.uuid4().hex[:6])
    written: int = 0  # ingest records written so far (the next record's number)

    def __post_init__(self) -> None:
        self.prefix = f"scale{uuid.uuid4().hex[:6]}."
        self.topics = EnricherTopics.with_prefix(self.prefix)
        names = [*self.topics.ingest, self.topics.master, *self.topics.outputs()]
        ensure_topics(self.bootstrap, [TopicSpec(t, 4, 1, {}) for t in names])
        self.settings = EnricherSettings(
            checkpoint_location=str(self.work / f"checkpoint-{self.devices}"),
            starting_offsets="earliest",
            topics=self.topics,
            kafka=KafkaSettings(bootstrap_servers=self.bootstrap),
            shuffle_partitions=self.args.shuffle_partitions,
        )
        self.stats = str(self.work / f"sink-stats-{self.devices}.jsonl")

    def start(self, batch_records: int, trigger_seconds: float) -> Any:
        """Start the enricher's query on the fleet's checkpoint; return it."""
        from headwater.enricher.driver import job

        settings = dataclasses.replace(
            self.settings,
            max_records_per_trigger=batch_records,
            trigger_interval_seconds=trigger_seconds,
        )
        return job.write_stream(
            job.enrich_stream(job.read_ingest(self.spark, settings), settings),
            settings,
            self.stats,
        )

    def backlog(self, n: int) -> None:
        """Write ``n`` more ingest records, round robin over the fleet's devices."""
        bench_query.fill_backlog(
            self.bootstrap, self.topics.ingest[0], n, self.devices, self.run, first=self.written
        )
        self.written += n

    def wait(self, watch: bench_query.CompletionWatch, query: Any, count: int) -> None:
        """Wait for ``count`` completions within the run's time bound."""
        bench_query._wait_for(watch, query, count, self.clock.left(1800))
        if watch.count < count:
            raise OutOfTime(f"{watch.count} of {count} completions within the time bound")


def stop_between_batches(query: Any, bound_s: float = 60.0) -> None:
    """Stop ``query`` once its batches with rows are committed: completions show before that.

    A query stopped in its batch's commit aborts the batch, and the next start processes
    it again (its completions twice): the next phase would count them as its own. Done: a
    batch without rows reported progress after the last batch with rows (the keyed state's
    timers make Spark run such batches back to back), or no batch runs and no data waits.
    """
    deadline = time.monotonic() + bound_s  # also after the run's time bound passed
    idle = 0
    while idle < 2 and time.monotonic() < deadline and query.isActive:
        status = query.status
        quiet = not status["isTriggerActive"] and not status["isDataAvailable"]
        idle = idle + 1 if quiet or rows_committed(query.recentProgress) else 0
        time.sleep(0.25)
    query.stop()


def rows_committed(progress: list[Any]) -> bool:
    """Return True when a batch without rows came after every batch with rows."""
    batches = [json.loads(p.json) for p in progress]
    with_rows = [b["batchId"] for b in batches if b.get("numInputRows", 0) > 0]
    without = [b["batchId"] for b in batches if b.get("numInputRows", 0) == 0]
    return bool(without) and max(without) > max(with_rows, default=-1)


@contextlib.contextmanager
def running(
    fleet: Fleet, batch_records: int, trigger_seconds: float, from_end: bool = True
) -> Iterator[tuple[Any, bench_query.CompletionWatch]]:
    """Run the fleet's query and a watch of its completions; stop both between batches."""
    watch = bench_query.CompletionWatch(fleet.bootstrap, fleet.topics.completions, from_end)
    watch.start()
    query = fleet.start(batch_records, trigger_seconds)
    try:
        yield query, watch
    finally:
        stop_between_batches(query)
        watch.stop_flag = True
        watch.join(10)


def populate(fleet: Fleet) -> dict[str, Any]:
    """Give every device of the fleet master data and one message; return how long it took."""
    started = time.perf_counter()
    bench_query._masters(fleet.bootstrap, fleet.topics.master, fleet.devices)
    fleet.backlog(fleet.devices)  # records 0 .. N-1: one per device
    produced = time.perf_counter() - started
    with running(fleet, fleet.args.populate_batch_records, 0.0, from_end=False) as (query, watch):
        started = time.perf_counter()
        fleet.wait(watch, query, fleet.devices)
        processed = time.perf_counter() - started
    return {
        "populate_produce_s": round(produced, 1),
        "populate_process_s": round(processed, 1),
        "populate_msgs_per_s": round(fleet.devices / processed),
        "populate_commit": commit_profile([q.json for q in query.recentProgress]),
    }


def offered(fleet: Fleet, jvm_pid: int) -> dict[str, Any]:
    """Offer random devices' records at ``--rate``; return latency, commit time, memory."""
    args = fleet.args
    producer = bench_query._producer(fleet.bootstrap)
    with running(fleet, EnricherSettings.max_records_per_trigger, args.trigger_seconds) as (
        query,
        watch,
    ):
        sent = offer_scattered(producer, fleet, args.warmup_seconds)
        watch.measure_after_ms = measured_from = int(time.time() * 1000)
        cpu_before, done_before = bench_cpu.snapshot(), watch.count
        sent += offer_scattered(producer, fleet, args.seconds)
        fleet.wait(watch, query, sent)
        cpu = bench_cpu.per_message_us(cpu_before, bench_cpu.snapshot(), watch.count - done_before)
        mem = memory(jvm_pid)
    progress = [
        q.json
        for q in query.recentProgress
        if bench_query._epoch_ms(json.loads(q.json)["timestamp"]) >= measured_from
    ]
    return {
        "offered_rate_msgs_per_s": args.rate,
        "offered_seconds": args.seconds,
        **bench_query.latency_figures(watch.latency_ms),
        "cpu_offered": cpu,
        "offered_commit": commit_profile(progress),
        "memory_offered": mem,
    }


def offer_scattered(producer: Any, fleet: Fleet, seconds: float) -> int:
    """Produce ``--rate`` records a second of random devices for ``seconds``; return how many."""
    first = fleet.written
    sent = bench_query.offer_records(
        producer,
        fleet.topics.ingest[0],
        fleet.args.rate,
        seconds,
        lambda i, now_ms: scattered_record(first + i, fleet.devices, fleet.run, now_ms),
    )
    fleet.written += sent
    return sent


def drain(fleet: Fleet, jvm_pid: int) -> dict[str, Any]:
    """Drain ``--messages`` records back to back; return the sustained rate and commit time.

    The RocksDB working folders are measured while the query runs (its stores open).
    """
    args = fleet.args
    fleet.backlog(args.messages)
    since = time.time()
    with running(fleet, args.batch_records, 0.0) as (query, watch):
        fleet.wait(watch, query, args.messages)
        local = rocksdb_local_bytes(fleet.work / "spark-local", since)
        mem = memory(jvm_pid)
    progress = [q.json for q in query.recentProgress]
    steady = bench_query.steady_rate(progress, args.batch_records)
    return {
        "enricher_events_per_s": steady["msgs_per_s"],
        "drain_steady": steady["spread"],
        "drain_commit": commit_profile(progress),
        "memory_drain": mem,
        "rocksdb_local_bytes": local,
    }


def state_sizes(fleet: Fleet, local_bytes: int) -> dict[str, Any]:
    """Return the state's bytes, in all and per device, in the checkpoint and on local disk."""
    state_dir = Path(fleet.settings.checkpoint_location) / "state"
    in_checkpoint = dir_bytes(state_dir)
    snapshots = newest_snapshots_bytes(state_dir)
    n = fleet.devices
    return {
        "checkpoint_state_bytes": in_checkpoint,
        "checkpoint_state_bytes_per_device": round(in_checkpoint / n, 1),
        "newest_snapshots_bytes_per_device": round(snapshots / n, 1),
        "rocksdb_local_bytes_per_device": round(local_bytes / n, 1),
    }


def restart(fleet: Fleet) -> dict[str, Any]:
    """Kill ``headwater enricher run`` on the fleet's checkpoint, restart it, time the catch-up.

    The driver runs in a process of its own (it must be killed as a crash would); the
    backlog is written while it is down. Caught up: the backlog's last completion seen.
    """
    args = fleet.args
    env = {
        **os.environ,
        "HEADWATER_KAFKA_BOOTSTRAP_SERVERS": fleet.bootstrap,
        "HEADWATER_ENRICHER_TOPIC_PREFIX": fleet.prefix,
        "HEADWATER_ENRICHER_CHECKPOINT_LOCATION": fleet.settings.checkpoint_location,
        "HEADWATER_ENRICHER_SHUFFLE_PARTITIONS": str(args.shuffle_partitions),
        "HEADWATER_ENRICHER_SPARK_MASTER": args.spark_master,
        "HEADWATER_ENRICHER_TRIGGER_INTERVAL_SECONDS": str(args.trigger_seconds),
        "SPARK_LOCAL_DIRS": str(fleet.work / "spark-local-restart"),
        # Its temporary files (the sink's statistics) go with the run's folder too.
        "TMPDIR": str(fleet.work / "tmp-restart"),
    }
    (fleet.work / "tmp-restart").mkdir(exist_ok=True)
    command = [str(Path(sys.executable).with_name("headwater")), "enricher", "run"]
    log = open(fleet.work / "restart.log", "ab")  # noqa: SIM115 (the child's, closed below)

    def launch() -> subprocess.Popen[bytes]:
        return subprocess.Popen(command, env=env, stdout=log, stderr=log, start_new_session=True)

    watch = bench_query.CompletionWatch(fleet.bootstrap, fleet.topics.completions, from_end=True)
    watch.start()
    child = launch()
    try:
        # Running and caught up: a second's worth of records comes back complete.
        fleet.backlog(args.rate)
        bench_query._wait_for(watch, _Alive(child), args.rate, fleet.clock.left(300))
        os.killpg(child.pid, signal.SIGKILL)  # the driver and its JVM, as a crash
        child.wait(30)
        backlog = args.rate * args.restart_backlog_seconds
        fleet.backlog(backlog)
        before = watch.count
        started = time.perf_counter()
        child = launch()
        first = None
        deadline = time.perf_counter() + fleet.clock.left(600)
        while watch.count < before + backlog and time.perf_counter() < deadline:
            if first is None and watch.count > before:
                first = time.perf_counter() - started
            if child.poll() is not None:
                raise RuntimeError(f"the restarted enricher exited ({child.returncode})")
            time.sleep(0.2)
        caught_up = time.perf_counter() - started
        if watch.count < before + backlog:
            raise OutOfTime("the restarted enricher did not catch up within the time bound")
        jvm = [p for p, (part, _) in bench_cpu.snapshot(child.pid).items() if part == "spark_jvm"]
        return {
            "restart_backlog_messages": backlog,
            "restart_to_first_completion_s": round(first or caught_up, 1),
            "restart_to_caught_up_s": round(caught_up, 1),
            "restart_jvm_peak_rss_mib": rss_mib(jvm[0])["peak_rss_mib"] if jvm else 0.0,
        }
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGTERM)
            try:
                child.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait(30)
        log.close()
        watch.stop_flag = True
        watch.join(10)


class _Alive:
    """A child process in ``query._wait_for``'s terms (``isActive``, ``exception``)."""

    def __init__(self, child: subprocess.Popen[bytes]) -> None:
        self.child = child

    @property
    def isActive(self) -> bool:  # pyspark's name
        return self.child.poll() is None

    def exception(self) -> str:
        return f"the enricher exited with {self.child.returncode}"


def measure_fleet(
    spark: Any,
    bootstrap: str,
    devices: int,
    work: Path,
    args: argparse.Namespace,
    clock: Clock,
    with_restart: bool,
) -> dict[str, Any]:
    """Run the phases for one fleet; return its figures (one JSON line).

    Past the run's time bound the figures so far come back, with ``stopped`` saying why.
    """
    fleet = Fleet(spark, bootstrap, devices, work, args, clock)
    jvm_pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())

    def phase(name: str) -> None:  # on stderr, timed: to line up the phases with the machine
        print(f"bench scale: {devices} devices: {name}", file=sys.stderr, flush=True)

    result: dict[str, Any] = {"devices": devices, "load_average_at_start": os.getloadavg()}
    try:
        phase("populate")
        result |= populate(fleet)
        # The state of one message per device, before the later phases add their ids.
        result["populated_checkpoint_state_bytes_per_device"] = round(
            dir_bytes(Path(fleet.settings.checkpoint_location) / "state") / devices, 1
        )
        phase("offered")
        result |= offered(fleet, jvm_pid)
        phase("drain")
        result |= drain(fleet, jvm_pid)
        result |= state_sizes(fleet, result.pop("rocksdb_local_bytes"))
        if with_restart:
            phase("restart")
            result |= restart(fleet)
    except OutOfTime as exc:
        result["stopped"] = str(exc)
    result["load_average_at_end"] = os.getloadavg()
    return result


def check_targets(baseline: dict[str, Any], fleets: list[dict[str, Any]]) -> list[str]:
    """Return one line per target and measured fleet: met or missed."""
    lines = []
    for r in fleets:
        if "enricher_events_per_s" not in r:  # stopped before its drain
            figures = r
        else:
            figures = {
                **r,
                # Judged unrounded: 0.6999 is not 0.7.
                "share_of_baseline_rate": r["enricher_events_per_s"]
                / max(baseline["enricher_events_per_s"], 1),
            }
        for name, op, bound, label in TARGETS:
            if name not in figures:
                continue
            value = figures[name]
            shown = "none" if value is None else round(value, 3)
            lines.append(
                f"{r['devices']} devices, {label}: {shown} ({op} {bound}) "
                + bench_query.verdict(value, op, bound)
            )
    return lines


def project(baseline: dict[str, Any], largest: dict[str, Any], devices: int) -> dict[str, Any]:
    """Return a fleet's figures projected from two measured ones: per device, or linear.

    Bytes per device are taken as they are; the JVM's peak memory grows along the line
    through the baseline's figure and the largest fleet's; the populate time in proportion
    to the devices. The restart is not projected: its time is mostly the JVM's start on a
    busy machine, and the state it loads is the checkpoint's figure. Not a measurement.
    """
    out: dict[str, Any] = {"devices": devices, "projected_from": largest["devices"]}
    for name in (
        "checkpoint_state_bytes_per_device",
        "rocksdb_local_bytes_per_device",
        "newest_snapshots_bytes_per_device",
    ):
        out[name] = largest[name]
        out[name.replace("_per_device", "_total_mib")] = round(largest[name] * devices / 2**20)
    low, high = (
        baseline["memory_drain"]["jvm_peak_rss_mib"],
        largest["memory_drain"]["jvm_peak_rss_mib"],
    )
    slope = (high - low) / (largest["devices"] - baseline["devices"])
    out["jvm_peak_rss_mib"] = round(high + slope * (devices - largest["devices"]), 1)
    out["populate_process_s"] = round(largest["populate_process_s"] * devices / largest["devices"])
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the scale benchmark; print one JSON line per fleet, the targets, the projections."""
    parser = argparse.ArgumentParser(
        prog="headwater bench enricher scale",
        description=__doc__.split("\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--devices", type=int, nargs="+", default=[100_000])
    parser.add_argument(
        "--baseline-devices",
        type=int,
        default=1000,
        help="the fleet whose sustained rate the others are compared with",
    )
    parser.add_argument("--rate", type=int, default=5000, help="offered msg/s")
    parser.add_argument("--seconds", type=int, default=30, help="the measured offered phase")
    parser.add_argument(
        "--warmup-seconds",
        type=float,
        default=15.0,
        help="offered before the measured phase, not measured",
    )
    parser.add_argument("--messages", type=int, default=200_000, help="the drained backlog")
    parser.add_argument(
        "--batch-records",
        type=int,
        default=EnricherSettings.max_records_per_trigger,
        help="records per batch while draining (the enricher's default)",
    )
    parser.add_argument(
        "--populate-batch-records",
        type=int,
        default=50_000,
        help="records per batch while populating the state",
    )
    parser.add_argument(
        "--trigger-seconds",
        type=float,
        default=0.5,
        help="trigger interval under offered load and after the restart",
    )
    parser.add_argument(
        "--restart-backlog-seconds",
        type=int,
        default=60,
        help="the backlog written while the driver is down, at --rate",
    )
    parser.add_argument("--no-restart", action="store_true", help="skip the driver restart")
    parser.add_argument(
        "--project-to",
        type=int,
        nargs="*",
        default=[1_000_000],
        help="fleets not measured: projected from the largest measured one",
    )
    parser.add_argument(
        "--max-minutes",
        type=float,
        default=20.0,
        help="the whole run's time bound: it stops with what it measured",
    )
    parser.add_argument(
        "--work-dir",
        default="",
        help="checkpoints and Spark's local folders (default: a temporary "
        "folder, removed at the end)",
    )
    parser.add_argument(
        "--bootstrap-servers", default="", help="use this Kafka instead of an embedded broker"
    )
    parser.add_argument("--spark-master", default="local[2]")
    parser.add_argument("--shuffle-partitions", type=int, default=2)
    args = parser.parse_args(argv)
    if min(args.devices) <= args.baseline_devices:
        parser.error("--devices must be larger than --baseline-devices")
    if args.messages // args.batch_records < 10:
        parser.error("--messages must hold at least 10 batches of --batch-records")

    from headwater.enricher.driver import job
    from headwater.enricher.driver.stderr_json import route_stderr_through_json
    from headwater_dev.devstack.broker import EmbeddedBroker

    clock = Clock(time.monotonic() + args.max_minutes * 60)
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="bench-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    # RocksDB's working folders go to Spark's local folder: measured, and removed with ``work``.
    os.environ["SPARK_LOCAL_DIRS"] = str(work / "spark-local")
    route_stderr_through_json()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    broker = None
    bootstrap = args.bootstrap_servers
    if not bootstrap:
        broker = EmbeddedBroker().start()
        bootstrap = broker.bootstrap_servers
    spark = job.build_session(
        EnricherSettings(spark_master=args.spark_master, shuffle_partitions=args.shuffle_partitions)
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        results: list[dict[str, Any]] = []
        for devices in [args.baseline_devices, *args.devices]:
            result = measure_fleet(
                spark,
                bootstrap,
                devices,
                work,
                args,
                clock,
                with_restart=devices != args.baseline_devices and not args.no_restart,
            )
            results.append(result)
            print(json.dumps(result), flush=True)
            if "stopped" in result:
                break
        complete = [r for r in results if "stopped" not in r]
        if len(results) > 1:
            for line in check_targets(results[0], results[1:]):
                print("target:", line, flush=True)
            for devices in args.project_to:
                if len(complete) > 1 and devices > complete[-1]["devices"]:
                    print(
                        json.dumps({"projection": project(complete[0], complete[-1], devices)}),
                        flush=True,
                    )
    finally:
        spark.stop()
        if broker:
            broker.stop()
        if not args.work_dir:
            shutil.rmtree(work, ignore_errors=True)
    return 0
