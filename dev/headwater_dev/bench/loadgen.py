"""Load generators of the ingest benchmark: gRPC callers, streams, raw producers, overload.

Every generator stops at whichever comes first: the end of its records or its deadline
(``time.perf_counter()`` value), so one run stays bounded in time whatever the machine.
Requests are pre-encoded bytes: the client spends its CPU on gRPC, not on protobuf.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

import grpc
from aiokafka import AIOKafkaProducer
from confluent_kafka import Producer

from headwater.kafka.settings import PARTITIONER, resolve_kafka
from headwater.proto.ingest.v1 import ingest_messages_pb2 as api
from headwater.runtime.stats import quantile
from headwater.wire import varint

PUBLISH = "/headwater.ingest.v1.IngestService/PublishTelemetry"
STREAM = "/headwater.ingest.v1.IngestService/StreamTelemetry"

#: (key, value, headers): a record exactly as the ingest service writes it.
Record = tuple[bytes, bytes, list[tuple[str, str | bytes | None]]]


@dataclass
class Measured:
    """What one scenario did: messages answered, elapsed time, per-call latencies."""

    messages: int = 0
    seconds: float = 0.0
    latencies_s: list[float] = field(default_factory=list)
    failed: int = 0


def _raw(b: bytes) -> bytes:
    return b


def failed_in(response: bytes) -> int:
    """Count the messages of a publish response that were not written."""
    return sum(r.code != 0 for r in api.PublishTelemetryResponse.FromString(response).results)


async def unary_load(
    channel: grpc.aio.Channel,
    method: str,
    requests: Sequence[bytes],
    per_request: int,
    callers: int,
    deadline: float,
    check: Callable[[bytes], int] | None = None,
) -> Measured:
    """Send ``requests`` from ``callers`` concurrent callers until done or ``deadline``."""
    call = channel.unary_unary(method, request_serializer=_raw, response_deserializer=_raw)
    queue = iter(requests)
    out = Measured()
    lat = out.latencies_s

    async def caller() -> None:
        for request in queue:
            if time.perf_counter() >= deadline:
                return
            started = time.perf_counter()
            try:
                response = await call(request, timeout=30)
                if check is not None:
                    out.failed += check(response)
            except grpc.aio.AioRpcError:
                out.failed += per_request
            lat.append(time.perf_counter() - started)
            out.messages += per_request

    started = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(callers)))
    out.seconds = time.perf_counter() - started
    return out


async def stream_load(
    channel: grpc.aio.Channel,
    frames: Sequence[bytes],
    streams: int,
    deadline: float,
    window_frames: int = 8,
) -> Measured:
    """Send pre-encoded frames (messages only) over ``streams`` bidirectional streams.

    Each stream keeps at most ``window_frames`` unanswered frames, as a gateway would;
    latency is from sending a frame to its answer.
    """
    call = channel.stream_stream(
        STREAM,
        request_serializer=_raw,
        response_deserializer=api.StreamTelemetryResponse.FromString,
    )
    out = Measured()

    async def one(mine: Sequence[bytes]) -> None:
        sent: dict[int, float] = {}
        window = asyncio.Semaphore(window_frames)

        async def requests() -> AsyncIterator[bytes]:
            for i, frame in enumerate(mine):
                await window.acquire()
                if time.perf_counter() >= deadline:
                    return
                sent[i] = time.perf_counter()
                yield b"\x08" + varint(i) + frame  # frame_id = field 1, then the messages

        async for answer in call(requests(), timeout=300):
            out.latencies_s.append(time.perf_counter() - sent.pop(answer.frame_id))
            out.failed += sum(r.code != 0 for r in answer.results)
            out.messages += len(answer.results)
            window.release()

    started = time.perf_counter()
    await asyncio.gather(*(one(frames[i::streams]) for i in range(streams)))
    out.seconds = time.perf_counter() - started
    return out


async def raw_aiokafka(
    bootstrap: str, topic: str, records: Sequence[Record], deadline: float, headers: bool = True
) -> Measured:
    """One aiokafka producer, acks=all, idempotent (as ingest's): send all, then gather."""
    producer = AIOKafkaProducer(
        acks="all",
        enable_idempotence=True,
        linger_ms=5,
        **resolve_kafka(bootstrap).aiokafka_config("headwater-bench"),
    )
    await producer.start()
    out = Measured()
    try:
        futures = []
        started = time.perf_counter()
        for i, (key, value, hdrs) in enumerate(records):
            if i % 256 == 0 and time.perf_counter() >= deadline:
                break
            futures.append(
                await producer.send(topic, value, key=key, headers=hdrs if headers else None)
            )
        results = await asyncio.gather(*futures, return_exceptions=True)
        out.seconds = time.perf_counter() - started
        out.messages = len(futures)
        out.failed = sum(isinstance(r, BaseException) for r in results)
        return out
    finally:
        await producer.stop()


def raw_confluent(
    bootstrap: str, topic: str, records: Sequence[Record], deadline: float
) -> Measured:
    """One librdkafka producer, acks=all, delivery callbacks; blocking (run in a thread)."""
    # Not producer_config: this baseline has no idempotence, as it was measured.
    producer = Producer(
        resolve_kafka(bootstrap).confluent_config("headwater-bench")
        | {"acks": "all", "linger.ms": 5, "partitioner": PARTITIONER}
    )
    out = Measured()

    def delivered(err: object, _msg: object) -> None:
        if err is not None:
            out.failed += 1

    started = time.perf_counter()
    for i, (key, value, hdrs) in enumerate(records):
        if i % 256 == 0 and time.perf_counter() >= deadline:
            break
        while True:
            try:
                producer.produce(topic, value, key, headers=hdrs, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
        out.messages += 1
    producer.flush(60)
    out.seconds = time.perf_counter() - started
    return out


async def open_loop(
    channel: grpc.aio.Channel,
    request: bytes,
    calls_per_s: float,
    seconds: float,
    metadata: Sequence[tuple[str, str]] = (),
    sample: Callable[[], float] | None = None,
    max_outstanding: int = 2048,
    timeout_s: float = 10.0,
    window_ended: asyncio.Event | None = None,
) -> dict[str, Any]:
    """Offer ``calls_per_s`` batch calls (open loop) for ``seconds``; optionally sample RSS.

    Open loop: calls start on a clock, not when the previous one ends, so the server sees
    the offered rate whatever it answers (and the caller ignores RetryInfo, as a flood
    does). ``max_outstanding`` bounds the client's own memory; calls it could not start are
    counted as ``not_sent``. Returns the answers by code, the latency of each OK call, the
    RSS series (when ``sample`` is given) and how long the last answers took after the
    window.
    """
    call = channel.unary_unary(PUBLISH, request_serializer=_raw, response_deserializer=_raw)
    codes: dict[str, int] = {}
    ok_latencies: list[float] = []
    outstanding: set[asyncio.Task[None]] = set()
    not_sent = 0
    rss: list[tuple[float, float]] = []

    async def one() -> None:
        started = time.perf_counter()
        try:
            await call(request, timeout=timeout_s, metadata=metadata)
            name = "OK"
            ok_latencies.append(time.perf_counter() - started)
        except grpc.aio.AioRpcError as exc:
            name = exc.code().name
        codes[name] = codes.get(name, 0) + 1

    started = time.perf_counter()
    next_sample = started
    tick = 0.01  # launch the calls that are due every 10 ms
    launched = 0
    # How far behind its clock this client fell: a client that cannot launch calls on
    # time measures itself, not the server, so the report shows it.
    most_behind_s = 0.0
    while (now := time.perf_counter()) - started < seconds:
        most_behind_s = max(most_behind_s, now - started - launched / calls_per_s)
        if sample is not None and now >= next_sample:
            rss.append((round(now - started, 1), sample()))
            next_sample += 1.0
        due = int(calls_per_s * (now - started)) - launched
        for _ in range(due):
            launched += 1
            if len(outstanding) >= max_outstanding:
                not_sent += 1
                continue
            task = asyncio.create_task(one())
            outstanding.add(task)
            task.add_done_callback(outstanding.discard)
        await asyncio.sleep(max(0.0, tick - (time.perf_counter() - now)))
    if sample is not None:
        rss.append((round(time.perf_counter() - started, 1), sample()))  # end of the window
    ended = time.perf_counter()
    if window_ended is not None:
        window_ended.set()  # the offered load stops here; answers may still be due
    if outstanding:
        await asyncio.wait(outstanding, timeout=timeout_s + 5)
    return {
        "offered_calls": launched,
        "window_s": round(ended - started, 2),
        "codes": codes,
        "not_sent": not_sent,
        "client_most_behind_s": round(most_behind_s, 2),
        "ok_latencies_s": ok_latencies,
        "rss_series_mb": rss,
        "drain_s": round(time.perf_counter() - ended, 1),
    }


@dataclass(frozen=True)
class OpenLoopSpec:
    """One open-loop caller for :func:`open_loop_worker` (picklable)."""

    request: bytes
    calls_per_s: float
    seconds: float
    metadata: tuple[tuple[str, str], ...] = ()
    max_outstanding: int = 2048
    timeout_s: float = 10.0


def open_loop_worker(conn: Connection, target: str, specs: Sequence[OpenLoopSpec]) -> None:
    """A load-generator process: open-loop callers together, on their own event loop.

    Runs in a child process (``spawn``), so the load generator shares the GIL with neither
    the server nor the benchmark's RSS sampling. Each spec gets its own channel, so its
    own HTTP/2 connection, as separate gateways would. Talks over ``conn``: sends
    ``("ready", None)`` once connected, waits for ``"go"``, sends ``("ended", t)`` when the
    window ends (``t``: ``time.monotonic()``, comparable across processes) and then
    ``("result", [one open_loop result per spec])`` once the last answers are in.
    """

    async def run() -> None:
        loop = asyncio.get_running_loop()
        channels = [grpc.aio.insecure_channel(target) for _ in specs]
        try:
            await asyncio.gather(*(asyncio.wait_for(c.channel_ready(), 30) for c in channels))
            conn.send(("ready", None))
            await loop.run_in_executor(None, conn.recv)  # "go"
            ended = [asyncio.Event() for _ in specs]
            tasks = [
                asyncio.ensure_future(
                    open_loop(
                        channel,
                        spec.request,
                        spec.calls_per_s,
                        spec.seconds,
                        metadata=spec.metadata,
                        max_outstanding=spec.max_outstanding,
                        timeout_s=spec.timeout_s,
                        window_ended=event,
                    )
                )
                for channel, spec, event in zip(channels, specs, ended, strict=True)
            ]
            await asyncio.gather(*(e.wait() for e in ended))
            conn.send(("ended", time.monotonic()))
            conn.send(("result", list(await asyncio.gather(*tasks))))
        finally:
            await asyncio.gather(*(c.close() for c in channels))

    asyncio.run(run())


def percentile_ms(latencies_s: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile of latencies in milliseconds (None when there are none)."""
    found = quantile(latencies_s, q)
    return None if found is None else round(found * 1000, 1)
