"""Micro-benchmark of the ingest service's own Python per publish call, without gRPC or Kafka.

``python -m headwater_dev.bench.publish_path --calls 20000`` runs the real ``IngestServicer``
(admission, ordering, tracing at the shipped sampling ratio, metrics, the frame write path)
over single-message publish calls from 64 concurrent callers, against two stand-ins: a
servicer context that hands over the request at once, and a writer whose acks arrive one
event-loop step after the send (as the producer's poll thread hands them over). It prints
the CPU time per call (``time.process_time``), so it moves little with the machine's other
load, unlike ``headwater bench ingest``.

Why it exists (issue 23, docs/benchmarks.md): in the whole benchmark the same gRPC server
shape (request-streaming publish, ``context.read()``, one confluent-kafka produce and its
ack) costs ~105 µs of event-loop CPU per call and runs near the bare echo's rate; the
service's Python on top of it is what separates single calls from that rate. This measures
exactly that part, to compare changes to it in seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Iterator, Sequence
from typing import Any

from opentelemetry import trace

from headwater.endpoints import ENDPOINTS, Endpoint
from headwater.ingest.admission.auth import Authenticator
from headwater.ingest.metrics import IngestMetrics
from headwater.ingest.rpc.server import TRACE_RATIO
from headwater.ingest.rpc.servicer import IngestServicer
from headwater.ingest.settings import IngestSettings
from headwater.ingest.writers.protocol import Delivered
from headwater.runtime.telemetry import create_telemetry
from headwater.wire import length_field
from headwater_dev.bench.ingest_bench import make_records


class AckNextStep:
    """A RecordWriter whose records are acknowledged together one loop step after the send."""

    connected = True

    def __init__(self) -> None:
        self._waiting: list[asyncio.Future[Delivered]] = []
        self.offset = 0

    async def start(self) -> None:
        """Nothing to connect."""

    async def stop(self, timeout_s: float) -> None:
        """Nothing to flush."""

    async def send(
        self, topic: str, key: bytes, value: bytes, headers: Sequence[tuple[str, bytes]]
    ) -> asyncio.Future[Delivered]:
        """Queue one record (as :meth:`send_now`)."""
        return self.send_now(topic, key, value, headers)

    def send_now(
        self, topic: str, key: bytes, value: bytes, headers: Sequence[tuple[str, bytes]]
    ) -> asyncio.Future[Delivered]:
        """Queue one record; its future resolves on the next loop step, with the others."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Delivered] = loop.create_future()
        self._waiting.append(future)
        if len(self._waiting) == 1:
            loop.call_soon(self._ack_all)
        return future

    def _ack_all(self) -> None:
        waiting, self._waiting = self._waiting, []
        for future in waiting:
            self.offset += 1
            future.set_result(Delivered("bench", 0, self.offset))


class HandOver:
    """The servicer context of one call: the request is there, the deadline far away."""

    def __init__(self, request: bytes) -> None:
        self._request = request

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        """What a grpc-python caller without credentials sends."""
        return (("user-agent", "grpc-python-asyncio"),)

    def time_remaining(self) -> float:
        """The default deadline of the benchmark's callers (30 s)."""
        return 30.0

    def auth_context(self) -> dict[str, list[bytes]]:
        """No peer certificate."""
        return {}

    async def read(self) -> bytes:
        """The call's one request, at once."""
        return self._request

    async def abort_with_status(self, status: Any) -> None:
        """A refusal stops the benchmark: a refused call must not count as served."""
        raise RuntimeError(f"the benchmark's call was refused: {status}")


async def measure(
    calls: int, callers: int, rounds: int, traced: bool = True
) -> tuple[list[float], int]:
    """Run ``rounds`` rounds of ``calls`` publish calls.

    Returns:
        CPU µs per call of each round, and how many records the writer acknowledged.
    """
    telemetry = create_telemetry("headwater-publish-path-bench", trace_ratio=TRACE_RATIO)
    tracer = (
        telemetry.tracer_provider.get_tracer("headwater.ingest") if traced else trace.NoOpTracer()
    )
    settings = IngestSettings(allow_unauthenticated=True)
    writer = AckNextStep()
    servicer = IngestServicer(
        settings,
        writer,
        Authenticator(None, allow_unauthenticated=True),
        tracer,
        IngestMetrics(telemetry.meter_provider.get_meter("headwater.ingest")),
    )
    endpoint = ENDPOINTS[0]
    requests = [length_field(1, value) for _, value, _ in make_records(calls, 200)]
    out = []
    for _ in range(rounds):
        started = time.process_time()
        # One iterator shared by every caller: together they publish each request once.
        await asyncio.gather(
            *(_caller(servicer, endpoint, queue) for queue in [iter(requests)] * callers)
        )
        out.append((time.process_time() - started) / calls * 1e6)
    return out, writer.offset


async def _caller(servicer: IngestServicer, endpoint: Endpoint, queue: Iterator[bytes]) -> None:
    """Publish requests from the shared ``queue`` one call at a time until it is empty."""
    for request in queue:
        await servicer.publish(endpoint, None, HandOver(request))  # type: ignore[arg-type]


def main(argv: list[str] | None = None) -> int:
    """Print the CPU µs per single-message publish call of each round, as JSON."""
    parser = argparse.ArgumentParser(
        prog="python -m headwater_dev.bench.publish_path",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--calls", type=int, default=20000, help="calls per round")
    parser.add_argument("--callers", type=int, default=64, help="concurrent callers")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (the first warms up)")
    parser.add_argument(
        "--no-tracing", action="store_true", help="a no-op tracer: what tracing costs per call"
    )
    args = parser.parse_args(argv)
    per_call, written = asyncio.run(
        measure(args.calls, args.callers, args.rounds, not args.no_tracing)
    )
    print(
        json.dumps(
            {
                "calls": args.calls,
                "callers": args.callers,
                "tracing": not args.no_tracing,
                "records_written": written,
                "cpu_us_per_call": [round(x, 1) for x in per_call],
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
