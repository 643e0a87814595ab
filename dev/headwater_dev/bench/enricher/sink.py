"""Micro-benchmark of the enricher's Kafka sink (``kafka_sink.KafkaStreamWriter.write``).

``python -m headwater_dev.bench.enricher.sink --messages 20000`` builds one task's Arrow
batches as the JVM operator emits them (``schema.OUTPUT``, rows grouped by device: each
message's event, then its completion, three passthrough headers each, then the device's
state snapshot; ``--shape floor``: floor-jvm-hop's, an empty completion a message with the
ingest record's headers), writes them through the real writer to a real broker (an embedded
one unless ``--bootstrap``) several rounds, and prints the CPU time of this process per
message of each round and their median:
``time.process_time`` over the whole write, librdkafka's threads included (they are this
process's), so the machine's other load counts less than in wall time. No Spark.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from typing import Any

import pyarrow as pa

from headwater import record_headers as rh
from headwater.enricher.hop.schema import HEADERS, OUTPUT, fields
from headwater.enricher.sink import kafka_sink
from headwater.enricher.topics import EnricherTopics
from headwater.proto.events.v1 import completion_pb2, device_state_pb2, event_pb2
from headwater_dev.bench.enricher.traffic import telemetry_record

_HEADER = pa.struct([("key", pa.string()), ("value", pa.binary())])
_ARROW = {
    "string": pa.string(),
    "binary": pa.binary(),
    "long": pa.int64(),
    HEADERS: pa.list_(_HEADER),
}
#: The sink's input as Spark's Arrow conversion types ``schema.OUTPUT`` (no large types).
SCHEMA = pa.schema([(name, _ARROW[t]) for name, _, t in (f.partition(" ") for f in fields(OUTPUT))])
TENANT, SOURCE = "bench", "ingest.telemetry.v1"


def _event(i: int, device: str, now: int) -> event_pb2.Event:
    e = event_pb2.Event(
        event_id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"{TENANT}/{device}/m-{i}/0")),
        message_id=f"m-{i}",
        device_id=device,
        event_type="telemetry",
        tenant=TENANT,
        gateway_id="gw-bench",
        sequence=i + 1,
        source_format="acme.telemetry.v1",
        site="site-1",
        area_code="A1",
    )
    e.device_time.FromMilliseconds(now - 50)
    e.received_time.FromMilliseconds(now - 20)
    e.measurements.add(name="temperature", value=21.5 + i % 40, unit="celsius")
    e.measurements.add(name="humidity", value=40.1, unit="percent")
    return e


def _header_list(pairs: list[tuple[str, bytes]]) -> list[dict[str, Any]]:
    return [{"key": k, "value": v} for k, v in pairs]


def task_rows(messages: int, devices: int, topics: EnricherTopics, shape: str) -> list[dict]:
    """Return one task's output rows in the operator's order, a device's rows together.

    The enricher's (``Records.java``): each message's event, then its completion, both with
    the passthrough headers; after a device's messages its state snapshot. The floor's
    (``dev/jvm/bench-floor``): an empty completion with the ingest record's headers.
    """
    now = int(time.time() * 1000)
    rows: list[dict[str, Any]] = []
    for d in range(min(devices, messages)):
        device = f"dev-{d:05d}"
        mine = range(d, messages, devices)
        for i in mine:
            ref = f"{SOURCE}/{i % 6}/{i // 6}"
            row = dict(key=device.encode(), ref=ref, received_ms=None, batch_ms=now)
            if shape == "floor":
                _key, _value, ingest = telemetry_record(i, devices, TENANT, now)
                done = dict(topic=topics.completions, value=b"", role="completion", label="FLOOR")
                rows.append(row | done | dict(headers=_header_list(ingest)))
                continue
            passthrough = _header_list(
                [
                    (rh.MESSAGE_ID, f"m-{i}".encode()),
                    (rh.TENANT, TENANT.encode()),
                    (rh.RECEIVED_AT_MS, str(now - 20).encode()),
                ]
            )
            e = _event(i, device, now)
            event = dict(topic=topics.event_topic("telemetry"), value=e.SerializeToString())
            event |= dict(role="event", label="telemetry", event_id=e.event_id, batch_ms=None)
            rows.append(row | event | dict(headers=passthrough))
            c = completion_pb2.Completion(
                message_id=f"m-{i}",
                device_id=device,
                outcome=completion_pb2.OUTCOME_ENRICHED,
                attempt=1,
                tenant=TENANT,
            )
            c.source.topic, c.source.partition, c.source.offset = SOURCE, i % 6, i // 6
            c.completed_time.FromMilliseconds(now)
            done = dict(topic=topics.completions, value=c.SerializeToString(), role="completion")
            done |= dict(label="ENRICHED", received_ms=now - 20)
            rows.append(row | done | dict(headers=passthrough))
        if shape == "enricher":
            state = device_state_pb2.DeviceState(
                device_id=device, tenant=TENANT, last_sequence=len(mine), message_count=len(mine)
            )
            state.latest_values.add(name="temperature", value=21.5, unit="celsius")
            state.latest_values.add(name="humidity", value=40.1, unit="percent")
            snapshot = dict(topic=topics.state, key=f"{TENANT}/{device}".encode(), headers=[])
            snapshot |= dict(value=state.SerializeToString(), role="state", label="snapshot")
            rows.append(snapshot)
    return rows


def _batches(rows: list[dict[str, Any]], size: int) -> list[pa.RecordBatch]:
    return [
        pa.RecordBatch.from_pylist(rows[i : i + size], schema=SCHEMA)
        for i in range(0, len(rows), size)
    ]


def _close_producers() -> None:
    """Flush and drop the sink's producers: none may outlive the broker (nor reconnect)."""
    while kafka_sink._PRODUCERS:
        _key, producer = kafka_sink._PRODUCERS.popitem()
        producer.flush(30)


def main(argv: list[str] | None = None) -> int:
    """Write one task through the sink ``--rounds`` times; print each round's CPU a message."""
    parser = argparse.ArgumentParser(
        prog="python -m headwater_dev.bench.enricher.sink",
        description="CPU per message of the enricher's Kafka sink writing one task (no Spark).",
    )
    parser.add_argument("--messages", type=int, default=20_000, help="messages in the task")
    parser.add_argument("--devices", type=int, default=1000, help="devices the messages share")
    parser.add_argument("--rounds", type=int, default=5, help="writes of the task measured")
    parser.add_argument(
        "--batch", type=int, default=10_000, help="rows per Arrow batch (Spark's default)"
    )
    parser.add_argument(
        "--shape",
        choices=("enricher", "floor"),
        default="enricher",
        help="the enricher's records, or floor-jvm-hop's (a completion a message only)",
    )
    parser.add_argument("--partitions", type=int, default=6, help="partitions a topic")
    parser.add_argument("--bootstrap", help="a broker to write to (default: an embedded one)")
    parser.add_argument("--prefix", help="topic name prefix (default: a fresh one)")
    args = parser.parse_args(argv)

    from headwater.enricher.driver.job import kafka_options
    from headwater.enricher.driver.settings import EnricherSettings
    from headwater.kafka.admin import ensure_topics
    from headwater.kafka.settings import KafkaSettings
    from headwater.topics import TopicSpec
    from headwater_dev.devstack.broker import EmbeddedBroker

    topics = EnricherTopics.with_prefix(args.prefix or f"bench-sink-{uuid.uuid4().hex[:8]}.")
    rows = task_rows(args.messages, args.devices, topics, args.shape)
    warm = rows[:100]  # connects the producer and fetches the topics' metadata first
    written_to: dict[str, int] = {}  # what the warm-up and the rounds write, by topic
    for r in warm + rows * args.rounds:
        written_to[r["topic"]] = written_to.get(r["topic"], 0) + 1
    batches, warm_batches, records = (
        _batches(rows, args.batch),
        _batches(warm, args.batch),
        len(rows),
    )
    del rows, warm  # a worker holds no Python rows of its task, only the Arrow batches
    broker = None if args.bootstrap else EmbeddedBroker().start()
    bootstrap = args.bootstrap or broker.bootstrap_servers  # type: ignore[union-attr]
    try:
        specs = [TopicSpec(t, args.partitions, 1) for t in sorted(written_to)]
        ensure_topics(bootstrap, specs)
        settings = EnricherSettings(kafka=KafkaSettings(bootstrap_servers=bootstrap))
        writer = kafka_sink.KafkaStreamWriter(
            kafka_options(settings) | {"deadLetterTopic": topics.deadletter}
        )
        writer.write(iter(warm_batches))
        cpu, wall = [], []
        for n in range(1, args.rounds + 1):
            t0, w0 = time.process_time(), time.perf_counter()
            report = writer.write(iter(batches))
            cpu.append((time.process_time() - t0) / args.messages * 1e6)
            wall.append((time.perf_counter() - w0) / args.messages * 1e6)
            written = sum(v for k, v in report.counts.items() if k != kafka_sink.BYTES)
            if written != records:
                raise RuntimeError(f"round {n}: the sink wrote {written} of {records} records")
            print(
                f"round {n}: {records} records of {args.messages} messages, CPU "
                f"{cpu[-1]:.1f} µs a message (wall {wall[-1]:.1f})",
                flush=True,
            )
    finally:
        _close_producers()
        if broker is not None:
            broker.stop()
    summary = {
        "shape": args.shape,
        "messages": args.messages,
        "records": records,
        "rounds_cpu_us_per_message": [round(c, 1) for c in cpu],
        "cpu_us_per_message": round(statistics.median(cpu), 1),
        "wall_us_per_message": round(statistics.median(wall), 1),
        "written": written_to,
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
