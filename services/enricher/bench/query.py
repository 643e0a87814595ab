"""Benchmark: raw confluent-kafka ceiling vs. the enricher on local Spark, and latency.

``python -m headwater.enricher.bench --devices 1000 10000`` starts an embedded broker
(or uses ``--bootstrap-servers``), and for each fleet size and query:

1. fills an ingest topic with ``--messages`` telemetry records (all devices have master data);
2. raw ceiling: one confluent-kafka consumer reads them and a producer writes the same
   number of records (acks=all), no Spark;
3. drain: the query (``local[2]`` unless ``--spark-master``) drains the same backlog;
   sustained msg/s is measured from the first to the last completion;
4. latency: records are offered at ``--rate`` msg/s, first for ``--warmup-seconds`` (not
   measured: the JVM is still compiling the query's code), then for ``--seconds``; ingest
   received-at to completion visible, p50/p99, and CPU time per message by part
   (``bench/cpu.py``: Spark's JVM, its Python workers, the broker).

Before the first query, one unmeasured enricher run (a backlog of up to 20,000 records and
``--warmup-seconds`` of offered load) compiles the JVM's code, so the enricher, measured
first, does not meet a colder JVM than its floors. The queries, in one run: the enricher
(its state operator from ``--operator``, ``jvm`` by
default), then its floors (``--floors``, ``bench/floor.py``): ``floor-jvm``, the JVM keyed
operator with no work and no Python hop; ``floor-stateless``, one Python ``mapInArrow`` hop
and the sink, no state; ``floor-python``, PySpark's row-based keyed state with no work.

It prints one JSON line per fleet size and query (with where a micro-batch's time goes:
``profile_drain``, ``profile_offered``), then each target of issue 27 with met/missed, the
floors' figures beside it. Numbers, not assertions: this is not a test.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import tempfile
import threading
import time
import uuid
from datetime import datetime
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from headwater import record_headers as rh
from headwater.enricher.bench import cpu as bench_cpu
from headwater.enricher.driver.metrics import percentile
from headwater.enricher.driver.settings import EnricherSettings, EnricherTopics
from headwater.enricher.python_operator import profile
from headwater.kafka.admin import ensure_topics
from headwater.kafka.settings import KafkaSettings
from headwater.proto.device.v1 import device_message_pb2
from headwater.proto.master.v1 import device_master_pb2
from headwater.topics import TopicSpec, scoped_key

ACME = "application/vnd.acme.telemetry.v1+json"


def _producer(bootstrap: str) -> Any:
    return Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "batch.num.messages": 10000}
    )


def telemetry_record(
    i: int, devices: int, run: str, received_ms: int
) -> tuple[bytes, bytes, list[tuple[str, bytes]]]:
    """Return record ``i`` of a run as ingest writes it: (key, envelope bytes, headers)."""
    device = f"dev-{i % devices:05d}"
    mid = f"{run}-{i}"
    payload = b'{"temp_c": %d.5, "hum_pct": 40.1}' % (i % 40)
    dm = device_message_pb2.DeviceMessage(
        message_id=mid,
        device_id=device,
        sequence=i // devices + 1,
        content_type=ACME,
        payload=payload,
    )
    dm.device_time.FromMilliseconds(received_ms)
    headers = [
        (rh.MESSAGE_ID, mid.encode()),
        (rh.TENANT, b"bench"),
        (rh.GATEWAY_ID, b"gw-bench"),
        (rh.RECEIVED_AT_MS, str(received_ms).encode()),
        (rh.ENDPOINT, b"telemetry"),
    ]
    return device.encode(), dm.SerializeToString(), headers


def fill_backlog(bootstrap: str, topic: str, n: int, devices: int, run: str) -> None:
    """Produce ``n`` telemetry records of ``devices`` devices to ``topic`` (acks=all)."""
    p = _producer(bootstrap)
    now = int(time.time() * 1000)
    for i in range(n):
        key, value, headers = telemetry_record(i, devices, run, now)
        while True:
            try:
                p.produce(topic, value=value, key=key, headers=headers)
                break
            except BufferError:
                p.poll(0.05)
    p.flush(120)


def _masters(bootstrap: str, topic: str, devices: int) -> None:
    p = _producer(bootstrap)
    for d in range(devices):
        dev = f"dev-{d:05d}"
        m = device_master_pb2.DeviceMaster(
            device_id=dev, site="plant-1", area_code=f"A{d % 10}", tenant="bench"
        )
        # Master data is per tenant (the tenant of _record).
        p.produce(topic, key=scoped_key("bench", dev).encode(), value=m.SerializeToString())
        p.poll(0)
    p.flush(120)


def _consumer(bootstrap: str, topic: str) -> Consumer:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
        }
    )
    meta = c.list_topics(topic, timeout=10).topics[topic]
    c.assign([TopicPartition(topic, p, 0) for p in meta.partitions])
    return c


def raw_ceiling(bootstrap: str, source: str, sink: str, n: int) -> float:
    """Return records/s for consuming ``n`` records and producing as many (no Spark)."""
    c, p = _consumer(bootstrap, source), _producer(bootstrap)
    done, start = 0, time.perf_counter()
    while done < n and time.perf_counter() - start < 300:
        for m in c.consume(10000, timeout=0.5):
            if m.error() is None:
                while True:
                    try:
                        p.produce(sink, value=m.value(), key=m.key(), headers=m.headers())
                        break
                    except BufferError:
                        p.poll(0.05)
                done += 1
    p.flush(120)
    elapsed = time.perf_counter() - start
    c.close()
    return done / elapsed


class CompletionWatch(threading.Thread):
    """Counts completions as they become visible; records ingest-to-visible latency."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.c = _consumer(bootstrap, topic)
        self.count, self.first_t, self.last_t = 0, 0.0, 0.0
        self.latency_ms: list[float] = []
        self.stop_flag = False
        self.measure_after_ms = 0

    def run(self) -> None:
        """Consume until told to stop."""
        while not self.stop_flag:
            for m in self.c.consume(5000, timeout=0.2):
                if m.error() is not None:
                    continue
                now = time.time() * 1000
                self.count += 1
                self.first_t = self.first_t or time.perf_counter()
                self.last_t = time.perf_counter()
                received = dict(m.headers() or []).get(rh.RECEIVED_AT_MS)
                if received and int(received) >= self.measure_after_ms > 0:
                    self.latency_ms.append(now - int(received))
        self.c.close()


def offer(p: Any, topic: str, first: int, rate: int, seconds: float, devices: int, run: str) -> int:
    """Produce ``rate`` records a second for ``seconds`` from record ``first``; return how many."""
    start, sent = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        due = int((time.perf_counter() - start) * rate)
        now_ms = int(time.time() * 1000)
        while sent < due:
            key, value, headers = telemetry_record(first + sent, devices, run, now_ms)
            try:
                p.produce(topic, value=value, key=key, headers=headers)
            except BufferError:
                p.poll(0.05)
                continue
            sent += 1
        p.poll(0)
        time.sleep(0.005)
    p.flush(60)
    return sent


def bench_fleet(
    spark: Any,
    bootstrap: str,
    devices: int,
    n: int,
    rate: int,
    seconds: int,
    query_kind: str = "enricher",
    floor_buckets: int = 0,
    operator: str = "python",
    warmup: float = 0.0,
    trigger_seconds: float = 0.5,
) -> dict[str, Any]:
    """Run the three measurements for one fleet size, of one query (``QUERIES``)."""
    from headwater.enricher.driver import job

    topics = EnricherTopics.with_prefix(f"bench{uuid.uuid4().hex[:6]}.")
    names = [*topics.ingest, topics.master, *topics.outputs(), topics.completions + ".raw"]
    ensure_topics(bootstrap, [TopicSpec(t, 4, 1, {}) for t in names])
    _masters(bootstrap, topics.master, devices)
    run = uuid.uuid4().hex[:6]
    fill_backlog(bootstrap, topics.ingest[0], n, devices, run)
    ceiling = raw_ceiling(bootstrap, topics.ingest[0], topics.completions + ".raw", n)

    profile_dir = tempfile.mkdtemp(prefix="bench-profile-")
    stats_path = os.path.join(profile_dir, "sink-stats.jsonl")
    settings = EnricherSettings(
        checkpoint_location=tempfile.mkdtemp(prefix="bench-cp-"),
        profile_dir=profile_dir,
        starting_offsets="earliest",
        max_records_per_trigger=max(n // 4, 10000),
        trigger_interval_seconds=trigger_seconds,
        topics=topics,
        kafka=KafkaSettings(bootstrap_servers=bootstrap),
        state_operator=operator,
    )
    watch = CompletionWatch(bootstrap, topics.completions)
    watch.start()
    query = job.start(spark, settings, stats_path, _transform(query_kind, floor_buckets))
    deadline = time.monotonic() + 900
    while watch.count < n and time.monotonic() < deadline and query.isActive:
        time.sleep(0.2)
    if not query.isActive:
        raise RuntimeError(f"the {query_kind} query stopped: {query.exception()}")
    drain_end_ms = int(time.time() * 1000)
    first_batch = query.recentProgress[0].get("numInputRows", 0) if query.recentProgress else 0
    drained = watch.count
    window = max(watch.last_t - watch.first_t, 1e-6)
    sustained = (
        max(drained - first_batch, 0) / window if drained > first_batch else drained / window
    )

    # Steady offered load: paced producer with received-at = send time. The first
    # ``warmup`` seconds are not measured: the JIT is still compiling the query's code then
    # (jdk.Compilation: 6.7 s of compile time in the last 22 s of a 60 s run), and the
    # floors, measured later in the same JVM, would otherwise meet a warmer one.
    p = _producer(bootstrap)
    warm = offer(p, topics.ingest[0], n, rate, warmup, devices, run)
    watch.measure_after_ms = int(time.time() * 1000)
    measured_from = watch.count
    cpu_before = bench_cpu.snapshot()
    sent = offer(p, topics.ingest[0], n + warm, rate, seconds, devices, run)
    sent += warm
    target = n + sent
    deadline = time.monotonic() + 120
    while watch.count < target and time.monotonic() < deadline:
        time.sleep(0.2)
    cpu_offered = bench_cpu.per_message_us(
        cpu_before, bench_cpu.snapshot(), watch.count - measured_from
    )
    time.sleep(2 * settings.trigger_interval_seconds + 1)  # the last batches report progress
    progress = [p.json for p in query.recentProgress]
    query.stop()
    watch.stop_flag = True
    watch.join(10)
    lat = watch.latency_ms
    return {
        "query": query_kind
        + (f" ({floor_buckets} buckets)" if query_kind == "floor-python" and floor_buckets else ""),
        "operator": operator if query_kind == "enricher" else "",
        "devices": devices,
        "backlog_messages": n,
        "raw_ceiling_msgs_per_s": round(ceiling),
        "enricher_events_per_s": round(sustained),
        "ratio_to_ceiling": round(sustained / ceiling, 3),
        "offered_rate_msgs_per_s": rate,
        "offered_seconds": seconds,
        "warmup_seconds": warmup,
        "trigger_seconds": trigger_seconds,
        "offered_sent": sent,
        "completed_under_load": watch.count - n,
        "latency_ms_p50": round(percentile(lat, 0.5)),
        "latency_ms_p99": round(percentile(lat, 0.99)),
        # CPU per message of the offered phase, by part (bench_cpu): the figure that moves
        # least with the machine's other load.
        "cpu_offered": cpu_offered,
        "profile_drain": batch_profile(progress, profile_dir, stats_path, 0, drain_end_ms),
        "profile_offered": batch_profile(
            progress, profile_dir, stats_path, watch.measure_after_ms, 2**62
        ),
    }


#: The queries one run can measure: the enricher and its floors (``bench/floor.py``).
QUERIES = ("enricher", "floor-python", "floor-jvm", "floor-stateless")


def _transform(query_kind: str, floor_buckets: int) -> Any:
    from headwater.enricher.bench import floor as bench_floor
    from headwater.enricher.driver import job

    if query_kind == "floor-python":
        return functools.partial(bench_floor.floor_stream, buckets=floor_buckets)
    if query_kind == "floor-jvm":
        return bench_floor.jvm_floor_stream
    if query_kind == "floor-stateless":
        return bench_floor.stateless_floor_stream
    return job.enrich_stream


def batch_profile(
    progress_json: list[str], profile_dir: str, stats_path: str, since_ms: int, until_ms: int
) -> dict[str, Any]:
    """Return the median micro-batch with data between two times: where its time went.

    ``spark_*``: Spark's phases (``durationMs``: offsets, planning, write-ahead log, the
    batch itself, commit). ``state_*``: the keyed state's Python time summed over its
    tasks (decode with normalize, state calls, logic, output rows; ``pyspark_ms`` is the
    rest of the tasks' wall time: rows over Arrow in and out). ``sink_*``: the sink's
    own time producing, waiting for upstream rows (the keyed state runs in the same
    tasks), flush (acks of events) and completions, summed over tasks.
    """
    batches = [json.loads(p) for p in progress_json]
    batches = [
        b
        for b in batches
        if b.get("numInputRows", 0) > 0 and since_ms <= _epoch_ms(b["timestamp"]) < until_ms
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
    lines = [
        v
        for k, v in profile.per_batch(profile.read(profile_dir)).items()
        if since_ms <= k < until_ms and v.get("rows_in", 0) > 0
    ]
    state: dict[str, float] = {}
    for name in (*[f"{p}_ms" for p in profile.PHASES], "wall_ms"):
        state[f"state_{name}"] = percentile([x.get(name, 0.0) for x in lines], 0.5)
    busy = sum(state[f"state_{p}_ms"] for p in profile.PHASES)
    state["state_pyspark_ms"] = max(state["state_wall_ms"] - busy, 0.0)
    # +1: PySpark sets the grouping key with its own call before each device.
    state["state_calls_per_device"] = percentile(
        [(x.get("state_calls", 0) + x["keys"]) / x["keys"] for x in lines if x.get("keys")], 0.5
    )
    sink: dict[str, float] = {}
    if os.path.exists(stats_path):
        with open(stats_path, encoding="utf-8") as f:
            stats = [json.loads(x) for x in f if x.strip()]
        timings = [x.get("timing_ms", {}) for x in stats if x["batch_id"] in batch_ids]
        for k in ("wait_upstream", "produce", "flush", "completions"):
            sink[f"sink_{k}_ms"] = percentile([t.get(k, 0.0) for t in timings], 0.5)
    return {k: round(v, 2) for k, v in {**spark, **state, **sink}.items()}


def _epoch_ms(iso: str) -> int:
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
            jvm_floor = floors.get(devices, {}).get("floor-jvm")
            if name == "share_of_jvm_floor":
                if jvm_floor is None:
                    continue
                value: Any = round(
                    r["enricher_events_per_s"] / max(jvm_floor["enricher_events_per_s"], 1), 3
                )
            else:
                value = r[name]
            ok = value >= bound if op == ">=" else value <= bound
            verdict = "met" if ok else "MISSED"
            beside = "".join(
                f"; {q} {f[name]}" for q, f in sorted(floors.get(devices, {}).items()) if name in f
            )
            lines.append(f"{devices} devices, {label}: {value} ({op} {bound}{beside}) {verdict}")
    return lines


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print one JSON line per fleet size."""
    parser = argparse.ArgumentParser(
        prog="python -m headwater.enricher.bench", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--devices", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--messages", type=int, default=100_000, help="backlog size for throughput")
    parser.add_argument(
        "--rate", type=int, default=5000, help="offered msg/s for the latency phase"
    )
    parser.add_argument("--seconds", type=int, default=30, help="length of the latency phase")
    parser.add_argument(
        "--warmup-seconds",
        type=float,
        default=10.0,
        help="offered load before each latency phase, and one enricher run before the "
        "first query, not measured (the JIT warms up; 0: none)",
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
        help="the queries' trigger interval (HEADWATER_ENRICHER_TRIGGER_INTERVAL; 0: back to back)",
    )
    parser.add_argument(
        "--operator",
        choices=("python", "jvm"),
        default="jvm",
        help="the enricher's state operator (HEADWATER_ENRICHER_STATE_OPERATOR)",
    )
    parser.add_argument(
        "--floors",
        nargs="*",
        choices=[q for q in QUERIES if q != "enricher"],
        default=["floor-jvm", "floor-stateless"],
        help="floors measured after the enricher, per fleet size (bench/floor.py)",
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
    args = parser.parse_args(argv)

    from headwater.devstack.broker import EmbeddedBroker
    from headwater.enricher.driver import job
    from headwater.enricher.driver.stderr_json import route_stderr_through_json

    route_stderr_through_json()  # Spark's chatter off; results go to stdout
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
    for setting in args.conf:
        key, _, value = setting.partition("=")
        spark.conf.set(key, value)

    def measure(devices: int, kind: str, messages: int, seconds: int) -> dict[str, Any]:
        return bench_fleet(
            spark,
            bootstrap,
            devices,
            messages,
            args.rate,
            seconds,
            kind,
            args.floor_buckets,
            args.operator,
            warmup=args.warmup_seconds,
            trigger_seconds=args.trigger_seconds,
        )

    try:
        if args.warmup_seconds > 0:
            # One unmeasured enricher run first: the enricher is measured first, in a JVM
            # that has not compiled its code yet, and its floors after it in a warm one.
            measure(args.devices[0], "enricher", min(args.messages, 20_000), 0)
            print("warm-up run done (not measured)", file=sys.stderr, flush=True)
        results = []
        for devices in args.devices:
            for kind in ["enricher", *([] if args.no_floor else args.floors)]:
                result = measure(devices, kind, args.messages, args.seconds)
                results.append(result)
                print(json.dumps(result), flush=True)
        for line in check_targets(results):
            print("target:", line, flush=True)
    finally:
        spark.stop()
        if broker:
            broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
