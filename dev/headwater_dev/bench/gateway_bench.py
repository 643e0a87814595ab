"""``headwater bench gateway``: what the gateway's durable spool costs against direct calls.

One run starts the embedded broker (or uses ``--bootstrap``) and the ingest server in its
own process, then, on the same records and the same transport (one stream per endpoint,
frames of ``--frame`` messages, a window of 4 frames):

- direct: frames built in memory and sent, no spool (the ceiling: what a gateway that
  keeps nothing on disk gets);
- spool enqueue alone, per message (one transaction each) and in batches of ``--frame``
  (``enqueue_many``), with ``synchronous=FULL`` (survives power loss) and ``NORMAL``;
- spooled: the gateway client draining a spool that the producer fills at the same time
  in batches (FULL), first enqueue to last OK.

Prints msgs/s per scenario and spooled / direct.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc

from headwater.gateway.client import DeliveryReport, GatewayClient, GatewayConfig
from headwater.gateway.spool import NewMessage, Spool
from headwater.ids import uuid7
from headwater.proto.device.v1 import device_message_pb2
from headwater.proto.ingest.v1 import ingest_messages_pb2 as api
from headwater.wire import length_field, varint_field
from headwater_dev.bench import server_proc
from headwater_dev.bench.report import machine

CT = "application/vnd.acme.telemetry.v1+json"
WINDOW = 4


def make_readings(n: int, payload: int) -> list[NewMessage]:
    """``n`` readings of ``payload`` bytes from 100 devices, taking turns."""
    return [NewMessage(f"acme-{i % 100:03d}", CT, b"x" * payload) for i in range(n)]


async def _direct(target: str, readings: list[NewMessage], frame: int) -> float:
    """Send prepared envelopes on one stream with a window of frames; return msgs/s."""
    envelopes = []
    for i, r in enumerate(readings):
        m = device_message_pb2.DeviceMessage(
            message_id=uuid7(), device_id=r.device_id, sequence=i + 1, content_type=CT
        )
        m.payload = r.payload
        m.device_time.GetCurrentTime()
        envelopes.append(m.SerializeToString())
    frames = [
        varint_field(1, n + 1) + b"".join(length_field(2, e) for e in envelopes[i : i + frame])
        for n, i in enumerate(range(0, len(envelopes), frame))
    ]
    window = asyncio.Semaphore(WINDOW)
    async with grpc.aio.insecure_channel(target) as channel:
        call = channel.stream_stream(
            "/headwater.ingest.v1.IngestService/StreamTelemetry",
            request_serializer=None,
            response_deserializer=api.StreamTelemetryResponse.FromString,
        )()
        started = time.perf_counter()

        async def write() -> None:
            for f in frames:
                await window.acquire()
                await call.write(f)
            await call.done_writing()

        writer = asyncio.create_task(write())
        failed = 0
        try:
            async for answer in call:
                failed += sum(r.code != 0 for r in answer.results)
                window.release()
            await writer
        finally:
            writer.cancel()
        elapsed = time.perf_counter() - started
    if failed:
        raise RuntimeError(f"direct scenario: {failed} messages not written")
    return len(envelopes) / elapsed


def _enqueue_rate(directory: Path, readings: list[NewMessage], sync: str, batch: int) -> float:
    with Spool(directory / f"enqueue-{sync}-{batch}.db", synchronous=sync) as spool:  # type: ignore[arg-type]
        started = time.perf_counter()
        if batch == 1:
            for r in readings:
                spool.enqueue("telemetry", r.device_id, r.content_type, r.payload)
        else:
            for i in range(0, len(readings), batch):
                spool.enqueue_many("telemetry", readings[i : i + batch])
        return len(readings) / (time.perf_counter() - started)


async def _spooled(target: str, directory: Path, readings: list[NewMessage], frame: int) -> float:
    """Fill a spool in batches while the client drains it; first enqueue to last OK."""
    all_delivered = asyncio.Event()
    delivered = 0

    def count(outcome: DeliveryReport) -> None:
        nonlocal delivered
        delivered += outcome.status == "delivered"
        if delivered == len(readings):
            all_delivered.set()

    with Spool(directory / "spooled.db") as spool:
        config = GatewayConfig(target=target, frame_messages=frame, window_frames=WINDOW)
        async with GatewayClient(spool, config, count) as client:
            stop = asyncio.Event()
            sender = asyncio.create_task(client.run(stop))
            started = time.perf_counter()
            for i in range(0, len(readings), frame):
                await asyncio.to_thread(spool.enqueue_many, "telemetry", readings[i : i + frame])
                client.notify()
            await asyncio.wait_for(all_delivered.wait(), 300)
            elapsed = time.perf_counter() - started
            stop.set()
            await sender
    return len(readings) / elapsed


async def run_gateway_benchmark(
    messages: int, payload: int, frame: int, bootstrap: str | None
) -> dict[str, Any]:
    """Run every scenario once; return the report."""
    report: dict[str, Any] = {
        "machine_at_start": machine(),
        "options": {"messages": messages, "payload": payload, "frame": frame},
    }
    with server_proc.serving(bootstrap) as (target, _):
        readings = make_readings(messages, payload)
        deadline = time.monotonic() + 30
        while True:  # the server is up once a small direct run passes
            try:
                await _direct(target, readings[:10], frame)
                break
            except (grpc.aio.AioRpcError, RuntimeError):
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.3)
        await _direct(target, readings[: min(5000, messages)], frame)  # warm-up
        with tempfile.TemporaryDirectory() as tmp:
            directory = Path(tmp)
            rates = {
                "direct (no spool)": await _direct(target, readings, frame),
                "spooled, FULL, enqueue in batches": await _spooled(
                    target, directory, readings, frame
                ),
            }
            for sync in ("FULL", "NORMAL"):
                for batch in (1, frame):
                    name = f"enqueue only, {sync}, " + (
                        "one per transaction" if batch == 1 else f"{batch} per transaction"
                    )
                    rates[name] = await asyncio.to_thread(
                        _enqueue_rate, directory, readings, sync, batch
                    )
    report["msgs_per_s"] = {k: round(v) for k, v in rates.items()}
    report["spooled_vs_direct"] = round(
        rates["spooled, FULL, enqueue in batches"] / rates["direct (no spool)"], 3
    )
    report["machine_at_end"] = machine()
    return report
