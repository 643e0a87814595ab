"""``headwater bench ingest``: the ingest path against its ceilings, in one run.

Processes: the broker (embedded Apache Kafka, or ``--bootstrap``), the ingest server
(``headwater_dev.bench.server_proc``, the same ``IngestServer`` as ``headwater ingest serve``),
a bare grpc.aio echo server, and this process, the load generator. Every scenario uses a
prefix of the same records and stops at ``--messages`` or ``--duration``, whichever first;
its row carries the CPU each of those processes spent per message during it.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict, dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import grpc

from headwater import record_headers as rh
from headwater.ingest.admission.auth import hash_token
from headwater.ingest.settings import PRODUCERS, IngestSettings
from headwater.kafka.admin import ensure_topics
from headwater.proto.device.v1 import device_message_pb2
from headwater.topics import INGEST_TOPICS, TopicSpec
from headwater.wire import length_field
from headwater_dev.bench import gateway_overload, loadgen, server_proc
from headwater_dev.bench.loadgen import Measured, Record
from headwater_dev.bench.report import Row, cpu_us_per_msg, machine, make_row, verdicts
from headwater_dev.devstack.broker import EmbeddedBroker
from headwater_dev.devstack.ports import free_port

ECHO_METHOD = "/headwater.bench.Echo/Echo"
#: Offered load of the overload windows, as multiples of the capacity measured in the run.
OVERLOAD_FACTORS = (2.0, 10.0)
#: Noisy neighbour: ten gateways, each with a rate quota of a tenth of capacity; nine
#: offer half their quota, one offers ten times it.
NEIGHBOURS = 10
NEIGHBOUR_QUOTA_OF_CAPACITY = 0.1
POLITE_SHARE_OF_QUOTA = 0.5
NOISY_FACTOR = 10.0
NEIGHBOUR_SECONDS = 20.0
#: Closed-loop callers that measure capacity: enough to keep the server busy (4 left it
#: waiting between calls: the 2x window then ran at 157% of the "capacity").
CAPACITY_CALLERS = 16
#: Load-generator processes of an overload window (each its own connection and GIL).
OVERLOAD_WORKERS = 2
#: The probe after a window: how often it asks until the first OK.
PROBE_EVERY_S = 0.05


@dataclass(frozen=True)
class BenchOptions:
    """The size and shape of one run."""

    messages: int = 100_000
    duration_s: float = 10.0
    payload_sizes: tuple[int, ...] = (200, 1024)
    single_callers: int = 64
    batch_size: int = 100
    batch_callers: int = 4
    streams: int = 4
    stream_window: int = 8
    writer: str = PRODUCERS[0]
    overload_seconds: float = 0.0


def make_records(count: int, size: int) -> list[Record]:
    """``count`` valid telemetry messages, as records: (device id, message bytes, headers)."""
    base = device_message_pb2.DeviceMessage(
        content_type="application/octet-stream", sequence=1, payload=os.urandom(size)
    )
    base.device_time.GetCurrentTime()
    now_ms = str(int(time.time() * 1000)).encode()
    trace = f"00-{uuid.uuid4().hex}-{uuid.uuid4().hex[:16]}-01".encode()
    records = []
    for i in range(count):
        base.message_id = uuid.uuid4().hex
        base.device_id = f"bench-{i % 1000:04d}"
        headers: list[tuple[str, str | bytes | None]] = [
            (rh.MESSAGE_ID, base.message_id.encode()),
            (rh.CONTENT_TYPE, base.content_type.encode()),
            (rh.GATEWAY_ID, b"anonymous"),
            (rh.TENANT, b"default"),
            (rh.RECEIVED_AT_MS, now_ms),
            (rh.ENDPOINT, b"telemetry"),
            (rh.TRACEPARENT, trace),
        ]
        records.append((base.device_id.encode(), base.SerializeToString(), headers))
    return records


def run_echo_server(port: int) -> None:
    """A bare grpc.aio server: one generic unary method answering 16 bytes (child process)."""

    async def serve() -> None:
        async def echo(request: bytes, _context: grpc.aio.ServicerContext) -> bytes:
            return request[:16]

        server = grpc.aio.server()
        handler = grpc.unary_unary_rpc_method_handler(
            echo, request_deserializer=None, response_serializer=None
        )
        server.add_generic_rpc_handlers(
            [grpc.method_handlers_generic_handler("headwater.bench.Echo", {"Echo": handler})]
        )
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        await server.wait_for_termination()

    asyncio.run(serve())


class _Run:
    """Shared state of one run: servers, channels and the options."""

    def __init__(
        self,
        opts: BenchOptions,
        bootstrap: str,
        pid: int,
        ingest: grpc.aio.Channel,
        echo: grpc.aio.Channel,
        tokens_path: Path | None = None,
        target: str = "",
        cpu_pids: Mapping[str, int | None] | None = None,
    ) -> None:
        self.opts, self.bootstrap, self.pid = opts, bootstrap, pid
        self.ingest, self.echo = ingest, echo
        #: The server's tokens file (the noisy-neighbour gateways); re-read on change.
        self.tokens_path = tokens_path
        #: The ingest server's address, for load-generator processes.
        self.target = target
        #: The processes whose CPU per message every row carries (report.CPU_PROCESSES).
        self.cpu_pids = dict(cpu_pids or {})

    def deadline(self) -> float:
        """When a scenario started now must stop."""
        return time.perf_counter() + self.opts.duration_s

    async def scenario(
        self, key: str, name: str, kind: str, size: int, load: Callable[[], Awaitable[Measured]]
    ) -> Row:
        """Run one scenario: its row carries each process's CPU per message during it.

        An ingest scenario's row also carries the server's peak RSS during it.
        """
        if kind == "ingest":
            server_proc.reset_peak(self.pid)
        before = server_proc.cpu_snapshot(self.cpu_pids)
        m = await load()
        cpu = cpu_us_per_msg(before, server_proc.cpu_snapshot(self.cpu_pids), m.messages)
        rss = server_proc.status_mb(self.pid, "VmHWM") if kind == "ingest" else None
        return make_row(key, name, kind, size, m, rss, cpu)

    async def size_run(self, size: int) -> list[Row]:
        o, rows = self.opts, []
        records = make_records(o.messages, size)
        raw_topic = f"bench.raw.{size}"
        ensure_topics(self.bootstrap, [TopicSpec(raw_topic, 3, 1)])
        singles = [length_field(1, value) for _, value, _ in records]
        n = o.batch_size
        batches = [b"".join(singles[i : i + n]) for i in range(0, len(singles), n)]
        frames = [
            b"".join(length_field(2, v) for _, v, _ in records[i : i + n])
            for i in range(0, len(records), n)
        ]
        scenarios: list[tuple[str, str, str, Callable[[], Awaitable[Measured]]]] = [
            (
                "raw_aiokafka",
                "raw aiokafka (same records + headers)",
                "ceiling",
                lambda: loadgen.raw_aiokafka(self.bootstrap, raw_topic, records, self.deadline()),
            ),
            (
                "raw_aiokafka_bare",
                "raw aiokafka, no headers",
                "info",
                lambda: loadgen.raw_aiokafka(
                    self.bootstrap, raw_topic, records, self.deadline(), headers=False
                ),
            ),
            (
                "raw_confluent",
                "raw confluent-kafka producer (same records)",
                "ceiling",
                lambda: asyncio.to_thread(
                    loadgen.raw_confluent, self.bootstrap, raw_topic, records, self.deadline()
                ),
            ),
            (
                "echo_single",
                f"bare grpc echo, 1 msg/call, {o.single_callers} callers",
                "ceiling",
                lambda: loadgen.unary_load(
                    self.echo, ECHO_METHOD, singles, 1, o.single_callers, self.deadline()
                ),
            ),
            (
                "echo_batch",
                f"bare grpc echo, {n} msgs/call, {o.batch_callers} callers",
                "info",
                lambda: loadgen.unary_load(
                    self.echo, ECHO_METHOD, batches, n, o.batch_callers, self.deadline()
                ),
            ),
            (
                "single",
                f"ingest single-message, {o.single_callers} callers",
                "ingest",
                lambda: loadgen.unary_load(
                    self.ingest,
                    loadgen.PUBLISH,
                    singles,
                    1,
                    o.single_callers,
                    self.deadline(),
                    loadgen.failed_in,
                ),
            ),
            (
                "batch",
                f"ingest batch of {n}, {o.batch_callers} callers",
                "ingest",
                lambda: loadgen.unary_load(
                    self.ingest,
                    loadgen.PUBLISH,
                    batches,
                    n,
                    o.batch_callers,
                    self.deadline(),
                    loadgen.failed_in,
                ),
            ),
            (
                "stream",
                f"ingest streams ({o.streams}), frames of {n}, window {o.stream_window}",
                "ingest",
                lambda: loadgen.stream_load(
                    self.ingest, frames, o.streams, self.deadline(), o.stream_window
                ),
            ),
        ]
        for key, name, kind, load in scenarios:
            rows.append(await self.scenario(key, name, kind, size, load))
        return rows

    async def overload(self, size: int) -> dict[str, Any]:
        """Measure capacity, then the overload windows (2x, 10x) and the noisy neighbour."""
        o, n = self.opts, self.opts.batch_size
        records = make_records(n * 200, size)
        batches = [
            b"".join(length_field(1, v) for _, v, _ in records[i : i + n])
            for i in range(0, len(records), n)
        ]
        cpu_before = server_proc.cpu_seconds(self.pid)
        cal = await loadgen.unary_load(
            self.ingest,
            loadgen.PUBLISH,
            batches * 50,
            n,
            max(o.batch_callers, CAPACITY_CALLERS),
            time.perf_counter() + min(5.0, o.duration_s),
            loadgen.failed_in,
        )
        capacity = cal.messages / cal.seconds
        capacity_cpu_s = server_proc.cpu_seconds(self.pid) - cpu_before
        capacity_cpu_share = capacity_cpu_s / cal.seconds
        # The server's CPU per answered call at capacity: with the CPU per refusal from
        # the windows, it says what shedding costs against serving on this machine.
        cpu_per_call_ms = capacity_cpu_s / (cal.messages / n)
        windows = []
        for factor in OVERLOAD_FACTORS:
            windows.append(
                await self._overload_window(batches, capacity, factor, cpu_per_call_ms * 1000)
            )
        neighbour = await self._noisy_neighbour(batches[0], capacity)
        gateways = [
            await self._gateway_window(capacity, factor, size) for factor in OVERLOAD_FACTORS
        ]
        return {
            "payload": size,
            "seconds": o.overload_seconds,
            "capacity_msgs_per_s": round(capacity),
            "capacity_callers": max(o.batch_callers, CAPACITY_CALLERS),
            "server_cpu_ms_per_ok_call": round(cpu_per_call_ms * 1000, 2),
            "capacity_server_cpu_share": round(capacity_cpu_share, 2),
            "windows": windows,
            "neighbour": neighbour,
            "gateway_windows": gateways,
        }

    async def _gateway_window(self, capacity: float, factor: float, size: int) -> dict[str, Any]:
        """``factor`` x capacity offered through gateway-library clients (gateway_overload.py)."""
        await asyncio.sleep(2.0)  # let the previous window's memory settle
        before = server_proc.status_mb(self.pid, "VmRSS")
        peak = before
        done = asyncio.Event()

        async def sample() -> None:
            nonlocal peak
            while not done.is_set():
                peak = max(peak, server_proc.status_mb(self.pid, "VmRSS"))
                await asyncio.sleep(0.2)

        sampler = asyncio.create_task(sample())
        cpu_before = server_proc.cpu_seconds(self.pid)
        try:
            figures = await asyncio.to_thread(
                gateway_overload.run_window,
                self.target,
                factor * capacity,
                self.opts.overload_seconds,
                size,
            )
        finally:
            done.set()
            await sampler
        # The server's CPU over the window and the drain: on a small machine the gateway
        # processes' spools take CPU the server then lacks, which this shows.
        cpu_s = server_proc.cpu_seconds(self.pid) - cpu_before
        busy_s = self.opts.overload_seconds + figures["drain_s"]
        return {
            "factor": factor,
            **figures,
            "goodput_vs_capacity": round(figures["goodput_msgs_per_s"] / capacity, 3),
            "server_cpu_share": round(cpu_s / busy_s, 2) if busy_s else None,
            "rss_before_mb": before,
            "rss_growth_mb": round(peak - before, 1),
        }

    async def _overload_window(
        self, batches: list[bytes], capacity: float, factor: float, ok_call_cpu_ms: float
    ) -> dict[str, Any]:
        """Offer ``factor`` x capacity (open loop, anonymous) for overload_seconds.

        ``ok_call_cpu_ms`` is the server's CPU per answered call at capacity: the window's
        CPU beyond its OK calls' share is what its refusals cost.
        """
        o, n = self.opts, self.opts.batch_size
        await _first_ok(self.ingest, batches[2], within_s=30)
        await asyncio.sleep(2.0)  # let the previous window's memory settle
        before = server_proc.status_mb(self.pid, "VmRSS")
        server_proc.reset_peak(self.pid)
        offered_calls_per_s = factor * capacity / n
        share = loadgen.OpenLoopSpec(
            batches[0],
            offered_calls_per_s / OVERLOAD_WORKERS,
            o.overload_seconds,
            max_outstanding=2048 // OVERLOAD_WORKERS,
        )
        cpu_before = server_proc.cpu_seconds(self.pid)
        outs, series, ok_after = await self._drive(
            [[share] for _ in range(OVERLOAD_WORKERS)], probe=batches[1]
        )
        cpu_s = server_proc.cpu_seconds(self.pid) - cpu_before
        after_drain = server_proc.status_mb(self.pid, "VmRSS")
        end = series[-1][1]  # at the end of the window, load still on
        codes = _merge(out["codes"] for out in outs)
        latencies = [x for out in outs for x in out["ok_latencies_s"]]
        refused = sum(v for k, v in codes.items() if k != "OK")
        window_s = max(out["window_s"] for out in outs)
        # Refused calls the server's own code answered (gRPC's core refuses the rest
        # without running Python: CANCELLED at the client).
        python_refused = refused - codes.get("CANCELLED", 0)
        refusal_cpu_ms: float | None = None
        if python_refused:
            refusal_cpu_ms = (cpu_s - codes.get("OK", 0) * ok_call_cpu_ms / 1000) * 1000
            refusal_cpu_ms /= python_refused
            if refusal_cpu_ms <= 0:
                # OK calls cost more here than at capacity (a shared machine, CPU steal):
                # the split cannot be read from this window.
                refusal_cpu_ms = None
        return {
            "factor": factor,
            "offered_msgs_per_s": round(offered_calls_per_s * n),
            "load_processes": OVERLOAD_WORKERS,
            "rss_before_mb": before,
            "rss_end_of_window_mb": end,
            "rss_growth_mb": round(max(mb for _, mb in series) - before, 1),
            "rss_peak_mb": server_proc.status_mb(self.pid, "VmHWM"),
            "rss_after_drain_mb": after_drain,
            "codes": codes,
            "refused_exhausted_share": round(codes.get("RESOURCE_EXHAUSTED", 0) / refused, 3)
            if refused
            else 1.0,
            "goodput_msgs_per_s": round(codes.get("OK", 0) * n / window_s),
            "goodput_vs_capacity": round(codes.get("OK", 0) * n / window_s / capacity, 3),
            "ok_p99_ms": loadgen.percentile_ms(latencies, 0.99),
            "answers_ok_after_s": ok_after,
            "server_cpu_s": round(cpu_s, 1),
            "server_cpu_share": round(cpu_s / window_s, 2),
            "server_cpu_ms_per_refusal": None
            if refusal_cpu_ms is None
            else round(refusal_cpu_ms, 2),
            "offered_calls": sum(out["offered_calls"] for out in outs),
            "window_s": window_s,
            "not_sent": sum(out["not_sent"] for out in outs),
            "client_most_behind_s": max(out["client_most_behind_s"] for out in outs),
            "rss_series_mb": series,
            "drain_s": max(out["drain_s"] for out in outs),
        }

    async def _drive(
        self, workers: list[list[loadgen.OpenLoopSpec]], probe: bytes | None = None
    ) -> tuple[list[dict[str, Any]], list[tuple[float, float]], float | None]:
        """Run load-generator processes for one window; sample the server's RSS meanwhile.

        Returns every spec's result (in order), the RSS series (seconds, MB; once a second
        and at the end of the window) and, with ``probe``, the seconds from the end of the
        offered load to the first OK answer of a probe call sent from this process while
        the generators still wait for their last answers.
        """
        ctx = multiprocessing.get_context("spawn")
        loop = asyncio.get_running_loop()
        pipes, procs = [], []
        for specs in workers:
            parent, child = ctx.Pipe()
            proc = ctx.Process(
                target=loadgen.open_loop_worker, args=(child, self.target, specs), daemon=True
            )
            proc.start()
            pipes.append(parent)
            procs.append(proc)

        async def receive(conn: Connection, kind: str) -> Any:
            what, value = await loop.run_in_executor(None, conn.recv)
            assert what == kind, (what, kind)
            return value

        try:
            await asyncio.wait_for(asyncio.gather(*(receive(c, "ready") for c in pipes)), 60)
            for conn in pipes:
                conn.send("go")
            started = time.perf_counter()
            ended = [asyncio.ensure_future(receive(c, "ended")) for c in pipes]
            series: list[tuple[float, float]] = []
            while True:
                series.append(
                    (
                        round(time.perf_counter() - started, 1),
                        server_proc.status_mb(self.pid, "VmRSS"),
                    )
                )
                await asyncio.wait(ended, timeout=1.0, return_when=asyncio.ALL_COMPLETED)
                if all(f.done() for f in ended):
                    break
            series.append(
                (round(time.perf_counter() - started, 1), server_proc.status_mb(self.pid, "VmRSS"))
            )
            load_ended = max(f.result() for f in ended)
            ok_after = None
            if probe is not None:
                ok_after = round(await _first_ok(self.ingest, probe) - load_ended, 2)
            outs: list[dict[str, Any]] = []
            for conn in pipes:
                outs += await asyncio.wait_for(receive(conn, "result"), 60)
            return outs, series, ok_after
        finally:
            for proc in procs:
                proc.join(10)
                if proc.is_alive():
                    proc.kill()

    async def _noisy_neighbour(self, request: bytes, capacity: float) -> dict[str, Any]:
        """Nine well-behaved gateways alone, then beside one at 10x its quota."""
        o, n = self.opts, self.opts.batch_size
        seconds = min(o.overload_seconds, NEIGHBOUR_SECONDS)
        quota_calls_per_s = capacity * NEIGHBOUR_QUOTA_OF_CAPACITY / n
        polite_calls_per_s = quota_calls_per_s * POLITE_SHARE_OF_QUOTA
        assert self.tokens_path is not None
        # The server re-reads its tokens file within a second of a change.
        neighbour_tokens(self.tokens_path, round(quota_calls_per_s * len(request)))

        async def phase(noisy: bool) -> dict[str, Any]:
            await asyncio.sleep(2.0)
            polite = [
                loadgen.OpenLoopSpec(
                    request,
                    polite_calls_per_s,
                    seconds,
                    metadata=(("authorization", f"Bearer {_token(i)}"),),
                )
                for i in range(1, NEIGHBOURS)
            ]
            flood = loadgen.OpenLoopSpec(
                request,
                quota_calls_per_s * NOISY_FACTOR,
                seconds,
                metadata=(("authorization", f"Bearer {_token(0)}"),),
            )
            # The flood runs in a process of its own: it must not slow the nine's client.
            outs, _, _ = await self._drive([polite, [flood]] if noisy else [polite])
            mine = outs[: NEIGHBOURS - 1]
            ok = sum(m["codes"].get("OK", 0) for m in mine)
            result: dict[str, Any] = {
                "polite_goodput_msgs_per_s": round(ok * n / seconds),
                "polite_codes": _merge(m["codes"] for m in mine),
                "polite_p99_ms": loadgen.percentile_ms(
                    [x for m in mine for x in m["ok_latencies_s"]], 0.99
                ),
            }
            if noisy:
                result["noisy_codes"] = outs[-1]["codes"]
            return result

        alone = await phase(noisy=False)
        beside = await phase(noisy=True)
        return {
            "seconds": seconds,
            "quota_msgs_per_s": round(quota_calls_per_s * n),
            "polite_offered_msgs_per_s": round(polite_calls_per_s * n * (NEIGHBOURS - 1)),
            "noisy_offered_msgs_per_s": round(quota_calls_per_s * NOISY_FACTOR * n),
            "alone": alone,
            "beside_noisy": beside,
            "goodput_kept": round(
                beside["polite_goodput_msgs_per_s"] / max(alone["polite_goodput_msgs_per_s"], 1),
                3,
            ),
            "p99_rise": round(
                (beside["polite_p99_ms"] or 0) / max(alone["polite_p99_ms"] or 1e-9, 1e-9) - 1,
                3,
            ),
        }


async def _first_ok(channel: grpc.aio.Channel, request: bytes, within_s: float = 30) -> float:
    """Send ``request`` every PROBE_EVERY_S until one is answered OK; when (monotonic)."""
    call = channel.unary_unary(loadgen.PUBLISH)
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if loadgen.failed_in(await call(request, timeout=2)) == 0:
                return time.monotonic()
        except grpc.aio.AioRpcError:
            pass
        await asyncio.sleep(PROBE_EVERY_S)
    raise RuntimeError(f"the ingest server did not answer OK within {within_s:g} s")


def _token(i: int) -> str:
    return f"bench-gateway-token-{i:02d}"


def _merge(codes: Any) -> dict[str, int]:
    total: dict[str, int] = {}
    for c in codes:
        for k, v in c.items():
            total[k] = total.get(k, 0) + v
    return total


def neighbour_tokens(path: Path, quota_bytes_per_s: int) -> None:
    """Write the tokens file of the noisy-neighbour gateways (each with the same quota)."""
    lines = ["gateways:"]
    for i in range(NEIGHBOURS):
        lines += [
            f"  - id: bench-gw-{i:02d}",
            "    tenant: bench",
            f"    token_sha256: {hash_token(_token(i))}",
            '    devices: ["*"]',
            f"    rate_bytes_per_second: {quota_bytes_per_s}",
        ]
    path.write_text("\n".join(lines) + "\n")


async def run_benchmark(opts: BenchOptions, bootstrap: str | None = None) -> dict[str, Any]:
    """Run every scenario, then (with overload_seconds) the overload checks, and report.

    One run prints both, so the single-call verdict and the overload figures come from the
    same machine state (issue 23).
    """
    report: dict[str, Any] = {
        "command": " ".join(["headwater", *sys.argv[1:]]) if sys.argv else "",
        "machine_at_start": machine(),
        "options": asdict(opts),
        # The server's gRPC: the overload figures depend on its transport (docs/benchmarks.md,
        # "The gRPC transport"), which GRPC_EXPERIMENTS in the environment can change.
        "grpc": {"version": grpc.__version__, "experiments": os.environ.get("GRPC_EXPERIMENTS")},
    }
    broker = None if bootstrap else EmbeddedBroker().start()
    servers = bootstrap or (broker.bootstrap_servers if broker else "")
    echo_proc = ingest_proc = None
    tokens_dir = tempfile.TemporaryDirectory(prefix="headwater-bench-")
    tokens_path = Path(tokens_dir.name) / "tokens.yaml"
    neighbour_tokens(tokens_path, 0)  # the quota is set once capacity is measured
    try:
        report["broker"] = "--bootstrap " + servers if bootstrap else "embedded Apache Kafka"
        ensure_topics(servers, [TopicSpec(t, 3, 1) for t in INGEST_TOPICS.values()])
        echo_port, ingest_port = free_port(), free_port()
        echo_proc = multiprocessing.get_context("spawn").Process(
            target=run_echo_server, args=(echo_port,), daemon=True
        )
        echo_proc.start()
        ingest_proc = server_proc.start(
            servers,
            ingest_port,
            opts.writer,
            {IngestSettings.variable("tokens_file"): str(tokens_path)},
        )
        async with (
            grpc.aio.insecure_channel(f"127.0.0.1:{ingest_port}") as ingest,
            grpc.aio.insecure_channel(f"127.0.0.1:{echo_port}") as echo,
        ):
            warm = make_records(64, 200)
            await _first_ok(ingest, length_field(1, warm[0][1]))
            await asyncio.wait_for(echo.channel_ready(), 30)
            await loadgen.unary_load(  # warm up connections and code paths
                ingest,
                loadgen.PUBLISH,
                [length_field(1, r[1]) for r in warm],
                1,
                8,
                time.perf_counter() + 5,
            )
            run = _Run(
                opts,
                servers,
                ingest_proc.pid,
                ingest,
                echo,
                tokens_path,
                f"127.0.0.1:{ingest_port}",
                {
                    "load_gen": os.getpid(),
                    "broker": broker.pid if broker else None,
                    "echo": echo_proc.pid,
                    "server": ingest_proc.pid,
                },
            )
            rows: list[Row] = []
            for size in opts.payload_sizes:
                rows += await run.size_run(size)
            overload = None
            if opts.overload_seconds:
                overload = await run.overload(max(opts.payload_sizes))
                report["overload"] = overload
            report["results"] = [asdict(r) for r in rows]
            report["targets"] = verdicts(rows, overload)
            report["server_peak_rss_mb"] = server_proc.status_mb(ingest_proc.pid, "VmHWM")
            report["machine_at_end"] = {"loadavg": [round(x, 2) for x in os.getloadavg()]}
            return report
    finally:
        if ingest_proc is not None:
            ingest_proc.terminate()
            try:
                ingest_proc.wait(30)
            except Exception:
                ingest_proc.kill()
        if echo_proc is not None and echo_proc.pid is not None:  # None: a stop mid-start
            echo_proc.terminate()
            echo_proc.join(10)
        if broker is not None:
            broker.stop()
        tokens_dir.cleanup()
