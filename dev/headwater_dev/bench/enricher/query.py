"""Benchmark: the enricher on local Spark against its floors: latency, CPU, sustained rate.

``python -m headwater_dev.bench.enricher --devices 1000 10000`` starts an embedded broker
(or uses ``--bootstrap-servers``), and for each fleet size and query, one query on one
checkpoint (``local[2]`` unless ``--spark-master``):

1. warm-up: records are offered at ``--rate`` msg/s, not measured, for at least
   ``--warmup-seconds`` (``--first-warmup-seconds`` for the run's first query, in a cold
   JVM), then until the JIT has settled (``warm_up``; at most ``--max-warmup-seconds``):
   the JIT compiles the query's hot code meanwhile (on a fast machine within ~40 s of a
   cold start; on a slow one, minutes), and what it compiles is not a message's cost;
2. latency: offered at ``--rate`` for ``--seconds``; ingest received-at to completion
   visible, p50/p99, and CPU time per message by part (``bench/cpu.py``: Spark's JVM, its
   Python workers, the broker);
3. the query stops; ``--messages`` records are written as a backlog; raw ceiling: one
   confluent-kafka consumer reads as many and a producer writes them (acks=all), no Spark;
4. drain: the same query, restarted from its checkpoint in the same warm JVM, drains the
   backlog back to back in batches of ``--batch-records`` (at least 10); sustained msg/s is
   the median rate of the full batches after the first ``STEADY_SKIP`` (``steady_rate``),
   printed with every batch's rate and the spread, and the CPU per message of the drain.

Each measured phase prints the milliseconds the driver JVM's JIT spent compiling in it
(``jit_ms_*``): never 0, Spark plans and generates code for every batch, but a hot phase
shows as seconds of it. The queries, in one run: the enricher, then its floors (``--floors``,
``floor.py``): ``floor-jvm``, the JVM keyed operator with no work and no Python hop;
``floor-jvm-hop``, the same behind the enricher's Python hop doing no work (what the
design's hop costs before any decoding of ours); ``floor-jvm-decode`` (when asked for), the
same behind the enricher's own hop (the enricher less its operator's work and its events);
``floor-stateless``, one Python ``mapInArrow`` hop and the sink, no state;
``floor-python``, PySpark's row-based keyed state with no work. Every query is measured
the same way.

It prints one JSON line per fleet size and query (with where a micro-batch's time goes:
``profile_drain``, ``profile_offered``), then each target of issue 27 with met/missed, the
floors' figures beside it, and issue 40's: the enricher's CPU per message against
``floor-jvm-hop``'s (``cpu.ratio_lines``). Numbers, not assertions: this is not a test.

With ``--backlog-s``, last: the enricher's recovery from a backlog at ``--rate``
(``recovery.py``), its JSON line and its target.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

from headwater.enricher.driver.metrics import percentile
from headwater.enricher.driver.settings import EnricherSettings
from headwater.enricher.topics import EnricherTopics
from headwater.kafka.admin import ensure_topics
from headwater.kafka.settings import KafkaSettings
from headwater.topics import TopicSpec
from headwater_dev.bench.enricher import cpu as bench_cpu
from headwater_dev.bench.enricher import traffic


def bench_fleet(
    spark: Any,
    bootstrap: str,
    devices: int,
    n: int,
    rate: int,
    seconds: int,
    query_kind: str = "enricher",
    floor_buckets: int = 0,
    warmup: float = 0.0,
    max_warmup: float = 0.0,
    trigger_seconds: float = 0.5,
    batch_records: int = EnricherSettings.max_records_per_trigger,
) -> dict[str, Any]:
    """Run the measurements for one fleet size, of one query (``QUERIES``).

    In this order, one query on one checkpoint: offered load for ``warmup`` seconds (not
    measured: the JIT compiles the query's code), offered load for ``seconds`` (latency and
    CPU per message); then the query is stopped, a backlog of ``n`` records is written, and
    the query restarted from its checkpoint drains it in batches of ``batch_records``
    (sustained msg/s: ``steady_rate`` of those batches).
    """
    from headwater.enricher.driver import job

    topics = EnricherTopics.with_prefix(f"bench{uuid.uuid4().hex[:6]}.")
    names = [*topics.ingest, topics.master, *topics.outputs(), topics.completions + ".raw"]
    ensure_topics(bootstrap, [TopicSpec(t, 4, 1, {}) for t in names])
    traffic.write_masters(bootstrap, topics.master, devices)
    run = uuid.uuid4().hex[:6]

    stats_path = os.path.join(tempfile.mkdtemp(prefix="bench-stats-"), "sink-stats.jsonl")
    settings = EnricherSettings(
        checkpoint_location=tempfile.mkdtemp(prefix="bench-cp-"),
        starting_offsets="earliest",
        max_records_per_trigger=batch_records,
        trigger_interval_seconds=trigger_seconds,
        topics=topics,
        kafka=KafkaSettings(bootstrap_servers=bootstrap),
    )
    transform = _transform(query_kind, floor_buckets)
    watch = traffic.CompletionWatch(bootstrap, topics.completions)
    watch.start()
    query = job.write_stream(
        transform(job.read_ingest(spark, settings), settings), settings, stats_path
    )

    # Offered load: paced producer with received-at = send time. The warm-up (``warm_up``)
    # is not measured: the JIT is still compiling the query's code then.
    def phase(name: str) -> None:  # on stderr, timed: to line up a profile with the phases
        print(f"bench: {query_kind}, {devices} devices: {name}", file=sys.stderr, flush=True)

    phase("warm-up")
    p = traffic.producer(bootstrap)
    warmed = warm_up(
        lambda: jit_ms(spark),
        lambda first, s: traffic.offer(p, topics.ingest[0], first, rate, s, devices, run),
        warmup,
        max_warmup,
    )
    phase(f"warm-up {warmed.seconds:.0f} s, {warmed.describe()}")
    jit_before = jit_ms(spark)
    phase("offered (measured)")
    watch.measure_after_ms = int(time.time() * 1000)
    measured_from = watch.count
    cpu_before = bench_cpu.snapshot()
    sent = warmed.sent + traffic.offer(
        p, topics.ingest[0], warmed.sent, rate, seconds, devices, run
    )
    traffic.wait_for(watch, query, sent, 120)
    jit_offered = jit_ms(spark) - jit_before
    cpu_offered = bench_cpu.per_message_us(
        cpu_before, bench_cpu.snapshot(), watch.count - measured_from
    )
    offered_end_ms = int(time.time() * 1000)
    time.sleep(2 * settings.trigger_interval_seconds + 1)  # the last batches report progress
    offered_progress = [q.json for q in query.recentProgress]
    query.stop()
    watch.stop_flag = True  # latencies of the offered phase only
    watch.join(10)
    lat = watch.latency_ms

    # Drain: the backlog is written while the query is stopped (the producer does not
    # share the cores with it), then the same query, restarted from its checkpoint in
    # the same warm JVM, drains it in equal batches of ``batch_records``.
    phase("backlog")
    traffic.fill_backlog(bootstrap, topics.ingest[0], n, devices, run, first=sent)
    ceiling = traffic.raw_ceiling(bootstrap, topics.ingest[0], topics.completions + ".raw", n)
    drain_watch = traffic.CompletionWatch(bootstrap, topics.completions, from_end=True)
    drain_watch.start()
    drain_start_ms = int(time.time() * 1000)
    phase("drain")
    cpu_before, jit_before = bench_cpu.snapshot(), jit_ms(spark)
    # Back to back: a trigger interval longer than a batch would cap the faster query and
    # leave the cores idle between its batches.
    back_to_back = dataclasses.replace(settings, trigger_interval_seconds=0.0)
    raw = job.read_ingest(spark, back_to_back)
    query = job.write_stream(transform(raw, back_to_back), back_to_back, stats_path)
    traffic.wait_for(drain_watch, query, n, 900)
    jit_drain = jit_ms(spark) - jit_before
    phase("drained")
    cpu_drain = bench_cpu.per_message_us(cpu_before, bench_cpu.snapshot(), n)
    drain_end_ms = int(time.time() * 1000)
    time.sleep(2 * settings.trigger_interval_seconds + 1)
    drain_progress = [q.json for q in query.recentProgress]
    query.stop()
    drain_watch.stop_flag = True
    drain_watch.join(10)
    steady = steady_rate(drain_progress, batch_records)
    window = max(drain_watch.last_t - drain_watch.first_t, 1e-6)
    return {
        "query": query_kind
        + (f" ({floor_buckets} buckets)" if query_kind == "floor-python" and floor_buckets else ""),
        "devices": devices,
        "backlog_messages": n,
        "batch_records": batch_records,
        "raw_ceiling_msgs_per_s": round(ceiling),
        # Sustained: the median rate of the drain's steady batches (``steady_rate``).
        "enricher_events_per_s": steady["msgs_per_s"],
        "drain_batches_msgs_per_s": steady["batches"],
        "drain_steady_spread": steady["spread"],
        # The whole drain, first to last completion seen (start-up included): for reference.
        "drain_first_to_last_msgs_per_s": round(max(drain_watch.count - 1, 0) / window),
        "ratio_to_ceiling": round(steady["msgs_per_s"] / ceiling, 3),
        "offered_rate_msgs_per_s": rate,
        "offered_seconds": seconds,
        # How long the warm-up ran (at least ``warmup``), and whether the JIT had settled.
        "warmup_seconds": round(warmed.seconds, 1),
        "warmup_settled": warmed.settled,
        "jit_ms_warmup_last_slice": warmed.last_slice_jit_ms,
        # Milliseconds the JIT spent compiling during each measured phase (steady: ~0).
        "jit_ms_offered": jit_offered,
        "jit_ms_drain": jit_drain,
        "trigger_seconds": trigger_seconds,
        "offered_sent": sent,
        "completed_under_load": watch.count,
        **latency_figures(lat),
        # CPU per message by part (bench_cpu): the figure that moves least with the
        # machine's other load; offered at ``rate``, and draining the backlog.
        "cpu_offered": cpu_offered,
        "cpu_drain": cpu_drain,
        "profile_drain": batch_profile(
            drain_progress, stats_path, drain_start_ms, drain_end_ms + 1
        ),
        "profile_offered": batch_profile(
            offered_progress, stats_path, watch.measure_after_ms, offered_end_ms + 1
        ),
    }


#: The warm-up offers load in slices of this many seconds ...
WARMUP_SLICE_S = 10.0
#: ... until the JIT compiled for at most this share of a slice's wall time (on 2 slow cores
#: a cold JVM's JIT compiled for over half the wall time for minutes: docs/benchmarks.md).
JIT_SETTLED_SHARE = 0.1


@dataclasses.dataclass(frozen=True)
class WarmUp:
    """What a warm-up did: records offered, seconds, the JIT's last slice, settled or not."""

    sent: int
    seconds: float
    last_slice_jit_ms: int
    settled: bool

    def describe(self) -> str:
        """Return the JIT's state at the warm-up's end, for the phase line."""
        state = "settled" if self.settled else "NOT settled (figures include compiling)"
        return f"JIT {self.last_slice_jit_ms} ms in its last {WARMUP_SLICE_S:.0f} s: {state}"


def warm_up(
    jit: Callable[[], int],
    offer: Callable[[int, float], int],
    least_s: float,
    most_s: float,
    clock: Callable[[], float] = time.monotonic,
) -> WarmUp:
    """Offer load (``offer(first, seconds)``) for ``least_s``, then until the JIT settles.

    ``jit()``: the milliseconds the JIT has compiled so far (``jit_ms``).

    A query's figures are per message of a steady state: CPU spent compiling the query's
    code is not. A fixed warm-up was too short for the run's first query on a slow machine
    (its JVM compiled for 14.5 s of a 22 s drain, against 2.5 s when the same query ran
    again in the warm JVM). Bounded by ``most_s`` (or ``least_s`` if longer); a
    ``least_s`` of 0 offers nothing.
    """
    if least_s <= 0:
        return WarmUp(0, 0.0, 0, False)
    started, sent = clock(), 0
    while True:
        before = jit()
        sent += offer(sent, WARMUP_SLICE_S)
        compiled = jit() - before
        elapsed = clock() - started
        settled = compiled <= JIT_SETTLED_SHARE * WARMUP_SLICE_S * 1000
        if elapsed >= max(most_s, least_s) or (elapsed >= least_s and settled):
            return WarmUp(sent, elapsed, compiled, settled)


def jit_ms(spark: Any) -> int:
    """Return the milliseconds the driver JVM's JIT has spent compiling so far."""
    management = spark.sparkContext._jvm.java.lang.management.ManagementFactory
    return int(management.getCompilationMXBean().getTotalCompilationTime())


#: Full drain batches left out at the start of the drain (the restarted query's first
#: batches: state stores opened, plans made) before the steady ones are counted.
STEADY_SKIP = 2


def steady_rate(
    progress_json: list[str], batch_records: int, skip: int = STEADY_SKIP
) -> dict[str, Any]:
    """Return the sustained rate of a drain: the median over its steady batches.

    Each batch's rate is its rows over its whole trigger (``durationMs.triggerExecution``:
    offsets, planning, write-ahead log, the batch, commit), Spark's
    ``processedRowsPerSecond``. Steady batches are the full ones (``batch_records`` rows:
    the backlog's last, partial batch is not) after the first ``skip`` of them.

    Returns ``msgs_per_s`` (the median, 0 without a steady batch), ``batches`` (every full
    batch's rate in order, the skipped ones included) and ``spread`` (count, min, median
    and max of the steady batches, and max/min).
    """
    full = [
        b
        for b in (json.loads(p) for p in progress_json)
        if b.get("numInputRows", 0) == batch_records
    ]
    full.sort(key=lambda b: b["batchId"])
    rates = [
        b["numInputRows"] / max(b["durationMs"].get("triggerExecution", 0), 1) * 1000 for b in full
    ]
    steady = rates[skip:]
    median = statistics.median(steady) if steady else 0.0
    spread = {
        "steady_batches": len(steady),
        "min": round(min(steady)) if steady else 0,
        "median": round(median),
        "max": round(max(steady)) if steady else 0,
        "max_over_min": round(max(steady) / min(steady), 3) if steady else 0.0,
    }
    return {"msgs_per_s": round(median), "batches": [round(r) for r in rates], "spread": spread}


#: The queries one run can measure: the enricher and its floors (``floor.py``).
QUERIES = (
    "enricher",
    "floor-python",
    "floor-jvm",
    "floor-jvm-hop",
    "floor-jvm-decode",
    "floor-stateless",
)


def _transform(query_kind: str, floor_buckets: int) -> Any:
    from headwater.enricher.driver import job
    from headwater_dev.bench.enricher import floor as bench_floor

    if query_kind == "floor-python":
        return functools.partial(bench_floor.floor_stream, buckets=floor_buckets)
    if query_kind == "floor-jvm":
        return bench_floor.jvm_floor_stream
    if query_kind == "floor-jvm-hop":
        return bench_floor.jvm_hop_floor_stream
    if query_kind == "floor-jvm-decode":
        return functools.partial(bench_floor.jvm_hop_floor_stream, decoding=True)
    if query_kind == "floor-stateless":
        return bench_floor.stateless_floor_stream
    return job.enrich_stream


def batch_profile(
    progress_json: list[str], stats_path: str, since_ms: int, until_ms: int
) -> dict[str, Any]:
    """Return the median micro-batch with data between two times: where its time went.

    ``spark_*``: Spark's phases (``durationMs``: offsets, planning, write-ahead log, the
    batch itself, commit). ``sink_*``: the sink's own time producing, waiting for upstream
    rows (the keyed state runs in the same tasks), flush (acks of events) and completions,
    summed over tasks.
    """
    batches = [json.loads(p) for p in progress_json]
    batches = [
        b
        for b in batches
        if b.get("numInputRows", 0) > 0 and since_ms <= epoch_ms(b["timestamp"]) < until_ms
    ]
    batch_ids = {b["batchId"] for b in batches}
    spark = {
        f"spark_{k}_ms": percentile([b["durationMs"].get(k, 0) for b in batches], 0.5)
        for k in (
            "latestOffset",
            "queryPlanning",
            "walCommit",
            "addBatch",
            "commitOffsets",
            "triggerExecution",
        )
    }
    spark["rows_per_batch"] = percentile([b["numInputRows"] for b in batches], 0.5)
    sink: dict[str, float] = {}
    if os.path.exists(stats_path):
        with open(stats_path, encoding="utf-8") as f:
            stats = [json.loads(x) for x in f if x.strip()]
        timings = [x.get("timing_ms", {}) for x in stats if x["batch_id"] in batch_ids]
        for k in ("wait_upstream", "produce", "flush", "completions"):
            sink[f"sink_{k}_ms"] = percentile([t.get(k, 0.0) for t in timings], 0.5)
    return {k: round(v, 2) for k, v in {**spark, **sink}.items()}


def epoch_ms(iso: str) -> int:
    """Return a progress ``timestamp`` ("2026-11-23T11:57:13.975Z") in epoch ms."""
    return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)


#: Issue 27's targets: (fleet size, figure, comparison, bound, label).
TARGETS = (
    (1000, "latency_ms_p99", "<=", 2000, "p99 ms at the offered rate"),
    (1000, "latency_ms_p50", "<=", 1000, "p50 ms at the offered rate"),
    (1000, "enricher_events_per_s", ">=", 8000, "sustained msg/s"),
    (1000, "share_of_jvm_floor", ">=", 0.70, "share of the JVM-only floor's sustained msg/s"),
    (10000, "latency_ms_p99", "<=", 3000, "p99 ms at the offered rate"),
)


def latency_figures(latency_ms: list[float]) -> dict[str, Any]:
    """Return p50 and p99 (ms) of the measured messages and their count.

    None, not 0, when no message completed while measured (the query fell too far behind):
    a 0 would be judged "met".
    """
    if not latency_ms:
        return {"latency_ms_p50": None, "latency_ms_p99": None, "latency_samples": 0}
    return {
        "latency_ms_p50": round(percentile(latency_ms, 0.5)),
        "latency_ms_p99": round(percentile(latency_ms, 0.99)),
        "latency_samples": len(latency_ms),
    }


def verdict(value: float | None, op: str, bound: float) -> str:
    """Return "met" or "MISSED" for ``value op bound``; a missing figure is missed."""
    if value is None:
        return "MISSED (no message completed while measured)"
    return "met" if (value >= bound if op == ">=" else value <= bound) else "MISSED"


def _share(result: dict[str, Any], jvm_floor: dict[str, Any]) -> float:
    """Return ``result``'s sustained rate as a share of the JVM floor's (same run)."""
    return round(result["enricher_events_per_s"] / max(jvm_floor["enricher_events_per_s"], 1), 3)


def check_targets(results: list[dict[str, Any]]) -> list[str]:
    """Return one line per target whose fleet size was measured: met or missed.

    The enricher's figure is judged; the floors' (same fleet, same run) are shown beside it.
    """
    floors: dict[int, dict[str, dict[str, Any]]] = {}
    for r in results:
        if r.get("query", "").startswith("floor"):
            floors.setdefault(r["devices"], {})[r["query"]] = r
    lines = []
    for devices, name, op, bound, label in TARGETS:
        for r in results:
            if r["devices"] != devices or r.get("query", "").startswith("floor"):
                continue
            of_fleet = floors.get(devices, {})
            jvm_floor = of_fleet.get("floor-jvm")
            if name == "share_of_jvm_floor":
                if jvm_floor is None:
                    continue
                value: Any = _share(r, jvm_floor)
                # The other floors' shares too: floor-jvm-hop's is the most the design's
                # Python hop leaves for the enricher before any work of ours.
                shown = {q: _share(f, jvm_floor) for q, f in of_fleet.items() if f is not jvm_floor}
            else:
                value = r[name]
                shown = {q: f[name] for q, f in of_fleet.items() if name in f}
            beside = "".join(f"; {q} {v}" for q, v in sorted(shown.items()))
            lines.append(
                f"{devices} devices, {label}: {value} ({op} {bound}{beside}) "
                + verdict(value, op, bound)
            )
    return lines


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print one JSON line per fleet size (``scale ...``: ``scale.py``)."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["scale"]:  # the large fleets' run: a separate, longer one
        from headwater_dev.bench.enricher import scale

        return scale.main(argv[1:])
    parser = argparse.ArgumentParser(
        prog="python -m headwater_dev.bench.enricher",
        description=__doc__.split("\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--devices", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument(
        "--messages",
        type=int,
        default=240_000,
        help="the backlog drained for sustained msg/s: at least 10 batches of --batch-records",
    )
    parser.add_argument(
        "--batch-records",
        type=int,
        default=EnricherSettings.max_records_per_trigger,
        help="records per micro-batch while draining (maxOffsetsPerTrigger; the enricher's "
        "default); the sustained "
        f"rate is the median of the full batches after the first {STEADY_SKIP}",
    )
    parser.add_argument(
        "--rate", type=int, default=5000, help="offered msg/s for the latency phase"
    )
    parser.add_argument("--seconds", type=int, default=30, help="length of the latency phase")
    parser.add_argument(
        "--warmup-seconds",
        type=float,
        default=30.0,
        help="offered load before each query's latency phase and drain, not measured: the "
        "JIT compiles the query's code (0: none)",
    )
    parser.add_argument(
        "--first-warmup-seconds",
        type=float,
        default=60.0,
        help="the same for the run's first query, which meets a cold JVM",
    )
    parser.add_argument(
        "--max-warmup-seconds",
        type=float,
        default=300.0,
        help="a warm-up goes on past its least seconds, in slices of "
        f"{WARMUP_SLICE_S:.0f} s, until the JIT compiled for at most "
        f"{JIT_SETTLED_SHARE:.0%} of a slice, or this bound (the JSON line says which)",
    )
    parser.add_argument(
        "--bootstrap-servers", default="", help="use this Kafka instead of an embedded broker"
    )
    parser.add_argument("--spark-master", default="local[2]")
    parser.add_argument(
        "--shuffle-partitions", type=int, default=2, help="partitions of the keyed state"
    )
    parser.add_argument(
        "--trigger-seconds",
        type=float,
        default=0.5,
        help="the queries' trigger interval under offered load "
        "(HEADWATER_ENRICHER_TRIGGER_INTERVAL_SECONDS; 0: back to back); the drain runs "
        "back to back",
    )
    parser.add_argument(
        "--floors",
        nargs="*",
        choices=[q for q in QUERIES if q != "enricher"],
        default=["floor-jvm", "floor-jvm-hop", "floor-stateless"],
        help="floors measured after the enricher, per fleet size (floor.py)",
    )
    parser.add_argument("--no-floor", action="store_true", help="measure no floor")
    parser.add_argument(
        "--floor-buckets",
        type=int,
        default=0,
        help="key the floor by this many hash buckets of devices instead of by device",
    )
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark SQL setting for both queries, to measure a lever (repeatable)",
    )
    add_recovery_argument(parser)
    args = parser.parse_args(argv)
    if args.batch_records < 1 or args.messages // args.batch_records < 10:
        parser.error("--messages must hold at least 10 batches of --batch-records")
    if args.backlog_s < 0:
        parser.error("--backlog-s must be 0 (no recovery phase) or more seconds")

    from headwater.enricher.driver import job
    from headwater.enricher.driver.stderr_json import route_stderr_through_json
    from headwater_dev.bench.enricher import floor as bench_floor
    from headwater_dev.devstack.broker import EmbeddedBroker

    route_stderr_through_json()  # Spark's chatter off; results go to stdout
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    broker = None
    bootstrap = args.bootstrap_servers
    if not bootstrap:
        broker = EmbeddedBroker().start()
        bootstrap = broker.bootstrap_servers
    kinds = ["enricher", *([] if args.no_floor else args.floors)]
    # The JVM floors' operator is a jar of its own (dev/jvm/bench-floor), never the enricher's.
    uses_jvm_floor = any(kind.startswith("floor-jvm") for kind in kinds)
    spark = job.build_session(
        EnricherSettings(
            spark_master=args.spark_master, shuffle_partitions=args.shuffle_partitions
        ),
        extra_jars=bench_floor.jars() if uses_jvm_floor else (),
    )
    spark.sparkContext.setLogLevel("ERROR")
    for setting in args.conf:
        key, _, value = setting.partition("=")
        spark.conf.set(key, value)

    def measure(devices: int, kind: str, warmup: float) -> dict[str, Any]:
        return bench_fleet(
            spark,
            bootstrap,
            devices,
            args.messages,
            args.rate,
            args.seconds,
            kind,
            args.floor_buckets,
            warmup=warmup,
            max_warmup=args.max_warmup_seconds,
            trigger_seconds=args.trigger_seconds,
            batch_records=args.batch_records,
        )

    try:
        results: list[dict[str, Any]] = []
        for devices in args.devices:
            for kind in kinds:
                # The first query meets a cold JVM: it warms up longer.
                warmup = args.warmup_seconds if results else args.first_warmup_seconds
                result = measure(devices, kind, warmup if args.warmup_seconds > 0 else 0)
                results.append(result)
                print(json.dumps(result), flush=True)
        recovery_target = measure_recovery(args, spark, bootstrap)
        for line in [*check_targets(results), *bench_cpu.ratio_lines(results), *recovery_target]:
            print("target:", line, flush=True)
    finally:
        spark.stop()
        if broker:
            broker.stop()
    return 0


def add_recovery_argument(parser: argparse.ArgumentParser) -> None:
    """Add ``--backlog-s``: the recovery phase (``recovery.py``), off by default."""
    parser.add_argument(
        "--backlog-s",
        type=float,
        default=0.0,
        help="after the other queries, measure the enricher's recovery from a backlog of this "
        "many seconds at --rate (issue 40: 60; the first --devices; 0: not measured)",
    )


def measure_recovery(args: argparse.Namespace, spark: Any, bootstrap: str) -> list[str]:
    """Run the recovery phase if ``--backlog-s`` asks; print its figures, return its target."""
    if not args.backlog_s:
        return []
    from headwater_dev.bench.enricher import recovery

    result = recovery.bench_recovery(
        spark, bootstrap, args.devices[0], args.rate, args.backlog_s, args.warmup_seconds
    )
    print(json.dumps(result), flush=True)
    return [recovery.target_line(result)]


if __name__ == "__main__":
    sys.exit(main())
