"""The enricher benches' Kafka side: records in, master data, and completions watched.

Records as ingest writes them, offered at a rate or written as a backlog; master data for
a fleet; a watch of the completions that come back. Shared by ``query`` (the benchmark and
its floors), ``recovery``, ``scale`` and the hop's own benches; no Spark here.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from headwater import record_headers as rh
from headwater.proto.device.v1 import device_message_pb2
from headwater.proto.master.v1 import device_master_pb2
from headwater.topics import scoped_key

ACME = "application/vnd.acme.telemetry.v1+json"


def producer(bootstrap: str) -> Any:
    """Return a producer that batches (the benches write hundreds of thousands of records)."""
    return Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "batch.num.messages": 10000}
    )


def produce(
    p: Any, topic: str, value: bytes | None, key: bytes | None, headers: Any = None
) -> None:
    """Produce one record, waiting while the producer's queue is full (a large run fills it)."""
    while True:
        try:
            p.produce(topic, value=value, key=key, headers=headers)
            return
        except BufferError:
            p.poll(0.05)


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


def fill_backlog(
    bootstrap: str, topic: str, n: int, devices: int, run: str, first: int = 0
) -> None:
    """Produce records ``first`` to ``first + n`` of ``devices`` devices to ``topic`` (acks=all)."""
    p = producer(bootstrap)
    now = int(time.time() * 1000)
    for i in range(first, first + n):
        key, value, headers = telemetry_record(i, devices, run, now)
        produce(p, topic, value, key, headers)
    p.flush(120)


def write_masters(bootstrap: str, topic: str, devices: int) -> None:
    """Write master data for devices ``dev-00000`` to ``devices - 1`` (tenant ``bench``)."""
    p = producer(bootstrap)
    for d in range(devices):
        dev = f"dev-{d:05d}"
        m = device_master_pb2.DeviceMaster(
            device_id=dev, site="plant-1", area_code=f"A{d % 10}", tenant="bench"
        )
        # Master data is per tenant (the tenant of telemetry_record).
        produce(p, topic, m.SerializeToString(), scoped_key("bench", dev).encode())
        p.poll(0)
    p.flush(120)


def consumer(bootstrap: str, topic: str, from_end: bool = False) -> Consumer:
    """Return a consumer of every partition of ``topic``, from the start or from its end now."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
        }
    )
    meta = c.list_topics(topic, timeout=10).topics[topic]
    starts = {p: 0 for p in meta.partitions}
    if from_end:
        starts = {p: c.get_watermark_offsets(TopicPartition(topic, p), 10)[1] for p in starts}
    c.assign([TopicPartition(topic, p, at) for p, at in starts.items()])
    return c


def raw_ceiling(bootstrap: str, source: str, sink: str, n: int) -> float:
    """Return records/s for consuming ``n`` records and producing as many (no Spark)."""
    c, p = consumer(bootstrap, source), producer(bootstrap)
    done, start = 0, time.perf_counter()
    while done < n and time.perf_counter() - start < 300:
        for m in c.consume(10000, timeout=0.5):
            if m.error() is None:
                produce(p, sink, m.value(), m.key(), m.headers())
                done += 1
    p.flush(120)
    elapsed = time.perf_counter() - start
    c.close()
    return done / elapsed


class CompletionWatch(threading.Thread):
    """Counts completions as they become visible; records ingest-to-visible latency, and when."""

    def __init__(self, bootstrap: str, topic: str, from_end: bool = False) -> None:
        super().__init__(daemon=True)
        self.c = consumer(bootstrap, topic, from_end)
        self.count, self.first_t, self.last_t = 0, 0.0, 0.0
        self.latency_ms: list[float] = []
        self.seen_ms: list[float] = []  # when each latency's completion became visible
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
                    self.seen_ms.append(now)
                    self.latency_ms.append(now - int(received))
        self.c.close()


def offer(p: Any, topic: str, first: int, rate: int, seconds: float, devices: int, run: str) -> int:
    """Produce ``rate`` records a second for ``seconds`` from record ``first``; return how many."""
    return offer_records(
        p, topic, rate, seconds, lambda i, now_ms: telemetry_record(first + i, devices, run, now_ms)
    )


def offer_records(
    p: Any,
    topic: str,
    rate: int,
    seconds: float,
    record: Callable[[int, int], tuple[bytes, bytes, list[tuple[str, bytes]]]],
) -> int:
    """Produce ``rate`` records a second for ``seconds``; return how many.

    ``record(i, now_ms)`` makes the ``i``-th record of this call: (key, value, headers).
    """
    start, sent = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        due = int((time.perf_counter() - start) * rate)
        now_ms = int(time.time() * 1000)
        while sent < due:
            key, value, headers = record(sent, now_ms)
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


def wait_for(watch: CompletionWatch, query: Any, count: int, seconds: float) -> None:
    """Wait until ``watch`` has seen ``count`` completions; raise if the query stopped."""
    deadline = time.monotonic() + seconds
    while watch.count < count and time.monotonic() < deadline and query.isActive:
        time.sleep(0.2)
    if not query.isActive:
        raise RuntimeError(f"the query stopped: {query.exception()}")
