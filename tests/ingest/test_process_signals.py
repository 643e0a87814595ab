"""The ingest process under load: SIGKILL loses nothing acknowledged; SIGTERM drains.

``headwater ingest serve`` runs as a real subprocess on the session broker. Several
callers (batch calls and long-lived streams) keep it busy; then it is killed or told to
stop. Whatever it answered OK must be in Kafka at the partition and offset it reported,
every call must end (no hang), and a SIGTERM must end in exit code 0 within the drain
grace period, with health NOT_SERVING while it drains.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from headwater import record_headers as rh
from headwater.kafka.read import read_topic
from headwater.proto.ingest.v1 import ingest_messages_pb2 as api
from headwater.proto.ingest.v1 import ingest_service_pb2_grpc
from headwater.topics import INGEST_TOPICS
from headwater_dev.devstack.ports import free_port
from tests.support.launch import launch

from .conftest import device_message

TOPIC = INGEST_TOPICS["telemetry"]
GRACE_S = 3.0
#: Process start-up to exit: interpreter teardown and the producer's final flush.
EXIT_SLACK_S = 2.5
START_WITHIN_S = 30.0
#: Acknowledged messages to reach before the signal: the load is real by then.
LOAD_ACKED = 300
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


@dataclass
class IngestProcess:
    proc: subprocess.Popen[bytes]
    target: str
    log: Path

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


def serve_command() -> list[str]:
    script = shutil.which("headwater", path=str(Path(sys.executable).parent))
    return [script, "ingest", "serve"] if script else [sys.executable, "-m", "headwater.cli"]


async def wait_serving(target: str, process: IngestProcess) -> None:
    """Watch health until SERVING (an event, not a poll), bounded."""
    async with grpc.aio.insecure_channel(target) as channel:
        watch = health_pb2_grpc.HealthStub(channel).Watch(
            health_pb2.HealthCheckRequest(), timeout=START_WITHIN_S, wait_for_ready=True
        )
        try:
            async for reply in watch:
                if reply.status == SERVING:
                    return
        except grpc.aio.AioRpcError as exc:
            raise AssertionError(f"ingest never SERVING ({exc.code()}):\n{process.tail()}") from exc
        finally:
            watch.cancel()


def spawn(kafka_bootstrap: str, log_path: Path, event_loop: str = "uvloop") -> IngestProcess:
    """Start ``headwater ingest serve`` on a free loopback port, logging to ``log_path``."""
    port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("OTEL_")},
        "HEADWATER_KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "HEADWATER_INGEST_LISTEN_ADDRESS": f"127.0.0.1:{port}",
        "HEADWATER_INGEST_METRICS_PORT": "0",
        "HEADWATER_INGEST_ALLOW_UNAUTHENTICATED": "true",
        "HEADWATER_INGEST_DRAIN_GRACE_SECONDS": str(GRACE_S),
        "HEADWATER_INGEST_PRODUCE_TIMEOUT_SECONDS": "5",
        "HEADWATER_INGEST_EVENT_LOOP": event_loop,
    }
    with open(log_path, "wb") as log:
        proc = launch(serve_command(), env=env, stdout=log, stderr=log)
    return IngestProcess(proc, f"127.0.0.1:{port}", log_path)


@pytest.fixture
async def ingest_process(
    request, kafka_bootstrap, ingest_topics, tmp_path
) -> AsyncIterator[IngestProcess]:
    """The service in its own process, on the event loop the test names (uvloop by default)."""
    process = spawn(kafka_bootstrap, tmp_path / "ingest.log", getattr(request, "param", "uvloop"))
    proc = process.proc
    try:
        await wait_serving(process.target, process)
        yield process
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


@dataclass
class Load:
    """Batch callers and stream callers against one target, recording every answer."""

    target: str
    devices: str = field(default_factory=lambda: f"sig-{uuid.uuid4().hex[:10]}")
    acked: dict[str, tuple[int, int]] = field(default_factory=dict)
    call_codes: list[grpc.StatusCode] = field(default_factory=list)
    message_codes: set[int] = field(default_factory=set)
    enough: asyncio.Event = field(default_factory=asyncio.Event)
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    def record(self, messages, results) -> None:
        assert [r.message_id for r in results] == [m.message_id for m in messages]
        for result in results:
            self.message_codes.add(result.code)
            if result.code == 0:
                self.acked[result.message_id] = (result.partition, result.offset)
        if len(self.acked) >= LOAD_ACKED:
            self.enough.set()

    async def batch_caller(self, n: int) -> None:
        async with grpc.aio.insecure_channel(self.target) as channel:
            stub = ingest_service_pb2_grpc.IngestServiceStub(channel)
            while not self.stop.is_set():
                messages = [device_message(f"{self.devices}-b{n}-{i}") for i in range(10)]
                try:
                    response = await stub.PublishTelemetry(
                        api.PublishTelemetryRequest(messages=messages), timeout=10
                    )
                except grpc.aio.AioRpcError as exc:
                    self.call_codes.append(exc.code())
                    if exc.code() == grpc.StatusCode.UNAVAILABLE:
                        return  # draining or gone: a gateway would go to another replica
                    continue
                self.call_codes.append(grpc.StatusCode.OK)
                self.record(messages, response.results)

    async def stream_caller(self, n: int) -> None:
        """One long-lived stream, a few frames in flight, until the server ends it."""
        async with grpc.aio.insecure_channel(self.target) as channel:
            stream = ingest_service_pb2_grpc.IngestServiceStub(channel).StreamTelemetry(timeout=60)
            sent: dict[int, list] = {}
            window = asyncio.Semaphore(4)

            async def write() -> None:
                frame_id = 0
                while not self.stop.is_set():
                    await window.acquire()
                    frame_id += 1
                    messages = [device_message(f"{self.devices}-s{n}-{i}") for i in range(5)]
                    sent[frame_id] = messages
                    request = api.StreamTelemetryRequest(frame_id=frame_id, messages=messages)
                    try:
                        await stream.write(request)
                    except grpc.aio.AioRpcError:
                        return  # the stream ended; its code is read below
                    except asyncio.InvalidStateError:
                        return
                await stream.done_writing()

            writer = asyncio.create_task(write())
            try:
                async for reply in stream:
                    self.record(sent.pop(reply.frame_id), reply.results)
                    window.release()
                self.call_codes.append(grpc.StatusCode.OK)
            except grpc.aio.AioRpcError as exc:
                if client_send_race(exc):
                    self.call_codes.append(grpc.StatusCode.OK)  # the server ended the stream
                else:
                    self.call_codes.append(exc.code())
            finally:
                writer.cancel()
                await asyncio.gather(writer, return_exceptions=True)

    async def run(self, batch_callers: int = 6, stream_callers: int = 2) -> asyncio.Task:
        """Start the callers; return once LOAD_ACKED messages are acknowledged."""
        callers = [self.batch_caller(n) for n in range(batch_callers)]
        callers += [self.stream_caller(n) for n in range(stream_callers)]
        everyone = asyncio.ensure_future(asyncio.gather(*callers))
        waiting = asyncio.ensure_future(self.enough.wait())
        await asyncio.wait([everyone, waiting], timeout=60, return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        if not self.enough.is_set():
            everyone.cancel()
            raise AssertionError(f"load never reached {LOAD_ACKED} acks: {self.call_codes[-5:]}")
        return everyone

    async def finish(self, callers: asyncio.Task, within_s: float) -> None:
        """Every caller ends by itself: no call hangs."""
        self.stop.set()
        await asyncio.wait_for(callers, within_s)


def client_send_race(exc: grpc.aio.AioRpcError) -> bool:
    """grpcio's own INTERNAL when a client writes to a stream the server just finished.

    ``_write`` turns the failed send into a local INTERNAL ("Internal error from Core")
    that hides the server's status; the server did nothing wrong. Frames answered before
    it are recorded; unanswered ones were never acknowledged.
    """
    return (
        exc.code() == grpc.StatusCode.INTERNAL
        and exc.details() == "Internal error from Core"
        and "SendMessageOperation" in (exc.debug_error_string() or "")
    )


async def assert_acked_are_in_kafka(bootstrap: str, load: Load) -> None:
    """Read the topic from the start; each acked id is at its reported coordinates."""
    prefix = load.devices.encode()

    def read() -> dict[tuple[int, int], str]:
        return {
            (msg.partition(), msg.offset()): dict(msg.headers() or [])[rh.MESSAGE_ID].decode()
            for msg in read_topic(bootstrap, TOPIC, timeout_s=60)
            if (msg.key() or b"").startswith(prefix)
        }

    stored = await asyncio.to_thread(read)
    missing = {mid: at for mid, at in load.acked.items() if stored.get(at) != mid}
    assert not missing, f"{len(missing)} of {len(load.acked)} acked messages not in Kafka"


async def test_sigkill_under_load_loses_nothing_acknowledged(ingest_process, kafka_bootstrap):
    load = Load(ingest_process.target)
    callers = await load.run()
    ingest_process.proc.send_signal(signal.SIGKILL)
    assert await asyncio.to_thread(ingest_process.proc.wait, 10) == -signal.SIGKILL
    # In-flight calls fail (the connection is gone); none hangs, none is OK after death.
    await load.finish(callers, within_s=30)
    assert grpc.StatusCode.UNAVAILABLE in load.call_codes
    await assert_acked_are_in_kafka(kafka_bootstrap, load)


@pytest.mark.parametrize("ingest_process", ["uvloop", "asyncio"], indirect=True)
async def test_sigterm_under_load_drains_and_exits_within_its_grace(
    ingest_process, kafka_bootstrap, request
):
    # The setting took effect: the process says which loop it runs on.
    expected = request.node.callspec.params["ingest_process"]
    assert f'"event_loop": "{expected}"' in ingest_process.tail(), ingest_process.tail()
    load = Load(ingest_process.target)
    async with grpc.aio.insecure_channel(ingest_process.target) as channel:
        watch = health_pb2_grpc.HealthStub(channel).Watch(
            health_pb2.HealthCheckRequest(), timeout=GRACE_S + 30
        )
        assert (await watch.read()).status == SERVING
        callers = await load.run()
        signalled = time.monotonic()
        ingest_process.proc.send_signal(signal.SIGTERM)
        # Health says NOT_SERVING while the process drains (the watch itself is then
        # cancelled by the server's shutdown at the end of the grace period).
        reply = await asyncio.wait_for(watch.read(), GRACE_S + EXIT_SLACK_S)
        assert reply is not grpc.aio.EOF and reply.status == NOT_SERVING
        code = await asyncio.to_thread(ingest_process.proc.wait, GRACE_S + 30)
        exited_after = time.monotonic() - signalled
        watch.cancel()
    await load.finish(callers, within_s=30)
    assert code == 0, ingest_process.tail()
    assert exited_after < GRACE_S + EXIT_SLACK_S, f"exit took {exited_after:.1f}s"
    # Calls ended cleanly: answered, or refused as draining/gone (retriable). CANCELLED:
    # gRPC core's Shutdown kills calls that arrived but were not yet handed to a handler
    # with CANCELLED instead of UNAVAILABLE (grpc/grpc#41785): no handler ran, nothing was
    # written or acknowledged, and a gateway resends. Anything else is a failure.
    clean = {grpc.StatusCode.OK, grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED}
    assert set(load.call_codes) <= clean, set(load.call_codes)
    # Per message: written, or refused as shutting down / broker unreachable (retriable).
    allowed = {0, grpc.StatusCode.UNAVAILABLE.value[0], grpc.StatusCode.DEADLINE_EXCEEDED.value[0]}
    assert load.message_codes <= allowed, load.message_codes
    await assert_acked_are_in_kafka(kafka_bootstrap, load)
