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
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from headwater.enricher.driver.settings import EnricherSettings
from headwater_dev.bench.enricher import cpu as bench_cpu
from headwater_dev.bench.enricher import query as bench_query
from headwater_dev.bench.enricher import traffic
from headwater_dev.bench.enricher.scale_fleet import (
    Clock,
    Fleet,
    OutOfTime,
    running,
    scattered_record,
)
from headwater_dev.bench.enricher.scale_probes import (
    commit_profile,
    dir_bytes,
    memory,
    newest_snapshots_bytes,
    rocksdb_local_bytes,
)
from headwater_dev.bench.enricher.scale_restart import restart

TARGETS = (
    ("share_of_baseline_rate", ">=", 0.70, "sustained msg/s as a share of the baseline fleet's"),
    ("latency_ms_p99", "<=", 3000, "p99 ms at the offered rate"),
    ("checkpoint_state_bytes_per_device", "<=", 1024, "state bytes per device in the checkpoint"),
    ("restart_to_caught_up_s", "<=", 60, "driver restart to caught up, seconds"),
)


def populate(fleet: Fleet) -> dict[str, Any]:
    """Give every device of the fleet master data and one message; return how long it took."""
    started = time.perf_counter()
    traffic.write_masters(fleet.bootstrap, fleet.topics.master, fleet.devices)
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
    producer = traffic.producer(fleet.bootstrap)
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
        if bench_query.epoch_ms(json.loads(q.json)["timestamp"]) >= measured_from
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
    sent = traffic.offer_records(
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
