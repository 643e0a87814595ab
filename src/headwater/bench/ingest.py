"""``headwater bench ingest``: the ingest path against its ceilings, in one run.

The embedded broker, the ingest service (``headwater ingest serve``) and a bare gRPC echo
server each run as their own process; the load comes from this one. Ceilings: the echo
RPC (what gRPC alone costs per call) and the raw aiokafka and confluent-kafka producers
(what Kafka alone costs per record), all on the same records.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import platform
import time
from dataclasses import dataclass
from typing import Any

import grpc

from headwater.bench import load
from headwater.bench.ceilings import ECHO_SERVICE, raw_aiokafka, raw_confluent, run_echo_server
from headwater.devstack.broker import EmbeddedBroker, free_port
from headwater.kafka_admin import ensure_topics
from headwater.proto.ingest.v1 import ingest_messages_pb2 as api
from headwater.topics import INGEST_TOPICS, TopicSpec

#: Targets from the issue.
SINGLE_VS_ECHO = 0.80
SINGLE_P99_MS = 20.0
BATCH_VS_AIOKAFKA = 1.00
RSS_GROWTH_MB = 50.0


@dataclass(frozen=True)
class BenchOptions:
    """Sizes of one benchmark run."""

    single_messages: int = 20_000
    batch_messages: int = 100_000
    payload_sizes: tuple[int, ...] = (200, 1024)
    single_callers: int = 64
    batch_size: int = 100
    batch_callers: int = 4
    streams: int = 4
    overload_seconds: float = 0.0


async def _size_run(
    opts: BenchOptions,
    size: int,
    bootstrap: str,
    ingest: grpc.aio.Channel,
    echo: grpc.aio.Channel,
    ingest_pid: int,
) -> list[load.Result]:
    results = []
    batch_msgs = load.make_messages(opts.batch_messages, size)
    records = [(m.device_id.encode(), m.SerializeToString()) for m in batch_msgs]
    ensure_topics(bootstrap, [TopicSpec(f"bench.raw.{size}", 3, 1)])
    secs = await raw_aiokafka(bootstrap, f"bench.raw.{size}", records)
    results.append(load.Result("raw aiokafka producer", size, len(records), secs))
    secs = await asyncio.get_running_loop().run_in_executor(
        None, raw_confluent, bootstrap, f"bench.raw.{size}", records
    )
    results.append(load.Result("raw confluent-kafka producer", size, len(records), secs))

    single_msgs = batch_msgs[: opts.single_messages]
    singles = [api.PublishTelemetryRequest(messages=[m]).SerializeToString() for m in single_msgs]
    secs, lat, failed = await load.unary_load(
        echo, f"/{ECHO_SERVICE}/Echo", singles, 1, opts.single_callers, lambda _r: 0
    )
    results.append(
        load.Result(
            f"bare grpc echo, {opts.single_callers} callers", size, len(singles), secs, lat, failed
        )
    )
    secs, lat, failed = await load.unary_load(
        ingest, load.PUBLISH, singles, 1, opts.single_callers, load.failed_in
    )
    results.append(
        load.Result(
            f"ingest single-message, {opts.single_callers} callers",
            size,
            len(singles),
            secs,
            lat,
            failed,
            load.rss_mb(ingest_pid),
        )
    )
    n = opts.batch_size
    encoded = [load.length_field(1, r[1]) for r in records]
    batches = [b"".join(encoded[i : i + n]) for i in range(0, len(encoded), n)]
    secs, lat, failed = await load.unary_load(
        ingest, load.PUBLISH, batches, n, opts.batch_callers, load.failed_in
    )
    results.append(
        load.Result(
            f"ingest batch of {n}, {opts.batch_callers} callers",
            size,
            len(records),
            secs,
            lat,
            failed,
            load.rss_mb(ingest_pid),
        )
    )
    frames = [
        b"".join(load.length_field(2, r[1]) for r in records[i : i + n])
        for i in range(0, len(records), n)
    ]
    secs, lat, failed = await load.stream_load(ingest, frames, opts.streams)
    results.append(
        load.Result(
            f"ingest streams ({opts.streams}), frames of {n}",
            size,
            len(records),
            secs,
            lat,
            failed,
            load.rss_mb(ingest_pid),
        )
    )
    return results


def _verdicts(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Compare each payload size's ingest figures with its ceilings."""
    verdicts = []
    for size in sorted({r["payload"] for r in rows}):
        by = {r["scenario"].split(",")[0].split(" (")[0]: r for r in rows if r["payload"] == size}
        echo, aiok = by["bare grpc echo"], by["raw aiokafka producer"]
        single, batch = (
            by["ingest single-message"],
            by.get("ingest batch of 100"),
        )
        ratio_single = single["msgs_per_s"] / echo["msgs_per_s"]
        verdicts.append(
            {
                "payload": size,
                "target": f"single-message >= {SINGLE_VS_ECHO:.0%} of echo",
                "value": f"{ratio_single:.0%}",
                "met": ratio_single >= SINGLE_VS_ECHO,
            }
        )
        verdicts.append(
            {
                "payload": size,
                "target": f"single-message p99 <= {SINGLE_P99_MS} ms",
                "value": f"{single['p99_ms']} ms",
                "met": single["p99_ms"] <= SINGLE_P99_MS,
            }
        )
        if batch:
            ratio_batch = batch["msgs_per_s"] / aiok["msgs_per_s"]
            verdicts.append(
                {
                    "payload": size,
                    "target": f"batch >= {BATCH_VS_AIOKAFKA:.0%} of raw aiokafka",
                    "value": f"{ratio_batch:.0%}",
                    "met": ratio_batch >= BATCH_VS_AIOKAFKA,
                }
            )
        stream = next(r for name, r in by.items() if name.startswith("ingest streams"))
        verdicts.append(
            {
                "payload": size,
                "target": "streams vs raw aiokafka (informative)",
                "value": f"{stream['msgs_per_s'] / aiok['msgs_per_s']:.0%}",
                "met": None,
            }
        )
    return verdicts


async def _overload(opts: BenchOptions, ingest: grpc.aio.Channel, pid: int) -> dict[str, Any]:
    """Offer about twice the measured capacity for ``overload_seconds``; report RSS growth."""
    msgs = load.make_messages(opts.batch_size * 50, 1024)
    encoded = b"".join(load.length_field(1, m.SerializeToString()) for m in msgs[: opts.batch_size])
    call = ingest.unary_unary(
        load.PUBLISH, request_serializer=lambda b: b, response_deserializer=lambda b: b
    )
    codes: dict[str, int] = {}
    until = time.monotonic() + opts.overload_seconds

    async def caller() -> None:
        while time.monotonic() < until:
            try:
                await call(encoded, timeout=30)
                codes["OK"] = codes.get("OK", 0) + 1
            except grpc.aio.AioRpcError as exc:
                codes[exc.code().name] = codes.get(exc.code().name, 0) + 1

    task = asyncio.gather(*(caller() for _ in range(opts.batch_callers * 4)))
    await asyncio.sleep(min(5.0, opts.overload_seconds / 4))
    start_rss = load.rss_mb(pid, "VmRSS")
    await task
    end_rss = load.rss_mb(pid, "VmRSS")
    growth = end_rss - start_rss
    return {
        "seconds": opts.overload_seconds,
        "callers": opts.batch_callers * 4,
        "rss_start_mb": start_rss,
        "rss_end_mb": end_rss,
        "rss_growth_mb": round(growth, 1),
        "calls_by_code": codes,
        "met": growth <= RSS_GROWTH_MB,
    }


async def run_benchmark(opts: BenchOptions, bootstrap: str | None = None) -> dict[str, Any]:
    """Run every scenario once and return the report."""
    with EmbeddedBroker() as broker:
        servers = bootstrap or broker.bootstrap_servers
        ensure_topics(servers, [TopicSpec(t, 3, 1) for t in INGEST_TOPICS.values()])
        echo_port, ingest_port = free_port(), free_port()
        echo_proc = multiprocessing.get_context("spawn").Process(
            target=run_echo_server, args=(echo_port,), daemon=True
        )
        echo_proc.start()
        ingest_proc = load.start_ingest(servers, ingest_port)
        try:
            async with (
                grpc.aio.insecure_channel(f"127.0.0.1:{ingest_port}") as ingest,
                grpc.aio.insecure_channel(f"127.0.0.1:{echo_port}") as echo,
            ):
                await load.wait_ready(ingest, load.make_messages(1, 10))
                await echo.channel_ready()
                results: list[load.Result] = []
                for size in opts.payload_sizes:
                    results += await _size_run(opts, size, servers, ingest, echo, ingest_proc.pid)
                rows = [r.row() for r in results]
                report: dict[str, Any] = {
                    "machine": {
                        "cpus": multiprocessing.cpu_count(),
                        "python": platform.python_version(),
                        "processor": _cpu_model(),
                    },
                    "results": rows,
                    "targets": _verdicts(rows),
                    "server_peak_rss_mb": load.rss_mb(ingest_proc.pid),
                }
                if opts.overload_seconds:
                    report["overload"] = await _overload(opts, ingest, ingest_proc.pid)
                return report
        finally:
            ingest_proc.terminate()
            ingest_proc.wait(30)
            echo_proc.terminate()
            echo_proc.join(10)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()
