"""Load generators and measurements for the ingest benchmark."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc

from headwater.proto.device.v1 import device_message_pb2
from headwater.proto.ingest.v1 import ingest_messages_pb2 as api

PUBLISH = "/headwater.ingest.v1.IngestService/PublishTelemetry"
STREAM = "/headwater.ingest.v1.IngestService/StreamTelemetry"


@dataclass
class Result:
    """One scenario's measurement."""

    scenario: str
    payload_bytes: int
    messages: int
    seconds: float
    latencies_s: list[float] = field(default_factory=list)
    failed: int = 0
    server_peak_rss_mb: float | None = None

    def row(self) -> dict[str, Any]:
        """The figures, rounded for printing."""
        lat = sorted(self.latencies_s)
        pct = (
            (lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] * 1000) if lat else (lambda q: 0.0)
        )
        rate = self.messages / self.seconds if self.seconds else 0.0
        return {
            "scenario": self.scenario,
            "payload": self.payload_bytes,
            "messages": self.messages,
            "msgs_per_s": round(rate),
            "mb_per_s": round(rate * self.payload_bytes / 1e6, 2),
            "p50_ms": round(pct(0.50), 2),
            "p99_ms": round(pct(0.99), 2),
            "failed": self.failed,
            "server_peak_rss_mb": self.server_peak_rss_mb,
        }


def rss_mb(pid: int, field_name: str = "VmHWM") -> float:
    """Return a process's memory figure from /proc in MB (VmHWM = peak resident)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field_name + ":"):
                return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def make_messages(count: int, payload_bytes: int) -> list[device_message_pb2.DeviceMessage]:
    """Return ``count`` valid device messages with payloads of ``payload_bytes``."""
    base = device_message_pb2.DeviceMessage(content_type="application/octet-stream", sequence=1)
    base.device_time.GetCurrentTime()
    payload = os.urandom(payload_bytes)
    messages = []
    for i in range(count):
        msg = device_message_pb2.DeviceMessage()
        msg.CopyFrom(base)
        msg.message_id = uuid.uuid4().hex
        msg.device_id = f"bench-{i % 1000:04d}"
        msg.payload = payload
        messages.append(msg)
    return messages


async def unary_load(
    channel: grpc.aio.Channel,
    method: str,
    requests: list[bytes],
    per_request: int,
    concurrency: int,
    check: Callable[[bytes], int],
) -> tuple[float, list[float], int]:
    """Send every request from ``concurrency`` callers; return (seconds, latencies, failed)."""
    call = channel.unary_unary(
        method, request_serializer=lambda b: b, response_deserializer=lambda b: b
    )
    queue = iter(requests)
    latencies: list[float] = []
    failed = 0

    async def caller() -> None:
        nonlocal failed
        for request in queue:
            started = time.perf_counter()
            try:
                response = await call(request, timeout=30)
                failed += check(response)
            except grpc.aio.AioRpcError:
                failed += per_request
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(concurrency)))
    return time.perf_counter() - started, latencies, failed


def failed_in(response: bytes) -> int:
    """Count the messages of a publish response that were not written."""
    return sum(r.code != 0 for r in api.PublishTelemetryResponse.FromString(response).results)


async def stream_load(
    channel: grpc.aio.Channel, frames: list[bytes], streams: int, window_frames: int = 8
) -> tuple[float, list[float], int]:
    """Send frames over ``streams`` bidirectional streams; return (seconds, latencies, failed)."""
    call = channel.stream_stream(
        STREAM,
        request_serializer=lambda b: b,
        response_deserializer=api.StreamTelemetryResponse.FromString,
    )
    share = [frames[i::streams] for i in range(streams)]
    latencies: list[float] = []
    failed = 0

    async def one(mine: list[bytes]) -> None:
        nonlocal failed
        sent: dict[int, float] = {}
        # A gateway keeps a bounded window of frames in flight, so latency means something.
        window = asyncio.Semaphore(window_frames)

        async def requests():
            for i, frame in enumerate(mine):
                await window.acquire()
                sent[i] = time.perf_counter()
                # frame_id (field 1) prefixed to the pre-encoded messages (field 2).
                yield b"\x08" + _varint(i) + frame

        async for answer in call(requests(), timeout=120):
            latencies.append(time.perf_counter() - sent.pop(answer.frame_id))
            failed += sum(r.code != 0 for r in answer.results)
            window.release()

    started = time.perf_counter()
    await asyncio.gather(*(one(m) for m in share))
    return time.perf_counter() - started, latencies, failed


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def length_field(number: int, data: bytes) -> bytes:
    """Encode ``data`` as length-delimited field ``number`` (to build requests as bytes)."""
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def start_ingest(bootstrap: str, port: int) -> subprocess.Popen[bytes]:
    """Start ``headwater ingest serve`` as its own process, without auth or metrics."""
    env = {
        **os.environ,
        "HEADWATER_KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "HEADWATER_KAFKA_ENABLE_IDEMPOTENCE": "false",
        "HEADWATER_INGEST_LISTEN_ADDRESS": f"127.0.0.1:{port}",
        "HEADWATER_INGEST_METRICS_PORT": "0",
        "HEADWATER_INGEST_ALLOW_UNAUTHENTICATED": "true",
        "HEADWATER_LOG_LEVEL": "WARNING",
    }
    return subprocess.Popen(
        [sys.executable, "-m", "headwater.cli", "ingest", "serve"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def wait_ready(
    channel: grpc.aio.Channel, messages: list[device_message_pb2.DeviceMessage]
) -> None:
    """Wait until the ingest service answers a publish with OK."""
    call = channel.unary_unary(
        PUBLISH, request_serializer=lambda b: b, response_deserializer=lambda b: b
    )
    request = api.PublishTelemetryRequest(messages=messages[:1]).SerializeToString()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if failed_in(await call(request, timeout=2)) == 0:
                return
        except grpc.aio.AioRpcError:
            pass
        await asyncio.sleep(0.2)
    raise RuntimeError("ingest service did not become ready")
