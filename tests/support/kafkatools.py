"""Test helpers: produce ingest records like the ingest service does, read topics back.

Reading a topic to its end is :func:`headwater.kafka.read.read_topic`, the one reader.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from headwater import record_headers as rh
from headwater.enricher.topics import EnricherTopics
from headwater.kafka.admin import ensure_topics
from headwater.kafka.read import read_topic
from headwater.proto.device.v1 import device_message_pb2
from headwater.proto.master.v1 import device_master_pb2
from headwater.topics import INGEST_TOPICS, TopicSpec, scoped_key
from tests.support.launch import launch

ACME = "application/vnd.acme.telemetry.v1+json"
GLOBEX = "application/vnd.globex.telemetry.v2+json"
INITECH = "text/vnd.initech.telemetry.v1+csv"
ALARM = "application/vnd.acme.alarm.v1+json"
#: The tenant of test messages (``Msg.tenant``) and master records unless told otherwise.
TENANT = "acme-tenant"


def make_topics(bootstrap: str, partitions: int = 2) -> EnricherTopics:
    """Create a fresh, uniquely prefixed set of enricher topics."""
    topics = EnricherTopics.with_prefix(f"t{uuid.uuid4().hex[:10]}.")
    names = [*topics.ingest, topics.master, *topics.outputs()]
    ensure_topics(bootstrap, [TopicSpec(n, partitions, 1, {}) for n in names])
    return topics


@dataclass(frozen=True)
class Msg:
    """One device message to ingest."""

    message_id: str
    device_id: str
    content_type: str
    payload: bytes
    sequence: int = 1
    device_time_ms: int = 1_700_000_000_000
    endpoint: str = "telemetry"
    tenant: str = "acme-tenant"


def envelope(m: Msg) -> bytes:
    dm = device_message_pb2.DeviceMessage(
        message_id=m.message_id,
        device_id=m.device_id,
        sequence=m.sequence,
        content_type=m.content_type,
        payload=m.payload,
    )
    dm.device_time.FromMilliseconds(m.device_time_ms)
    return dm.SerializeToString()


def ingest_headers(m: Msg, received_ms: int | None = None) -> list[tuple[str, bytes]]:
    return [
        (rh.MESSAGE_ID, m.message_id.encode()),
        (rh.GATEWAY_ID, b"gw-001"),
        (rh.TENANT, m.tenant.encode()),
        (rh.CONTENT_TYPE, m.content_type.encode()),
        (rh.RECEIVED_AT_MS, str(received_ms or int(time.time() * 1000)).encode()),
        (rh.ENDPOINT, m.endpoint.encode()),
        (rh.TRACEPARENT, b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
    ]


def producer(bootstrap: str) -> Producer:
    # The embedded broker supports confluent-kafka's idempotent producer.
    return Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5}
    )


def ingest(
    bootstrap: str, topics: EnricherTopics, msgs: list[Msg], raw: list[tuple[str, bytes]] = ()
) -> None:
    """Produce ``msgs`` to the ingest topic of their endpoint; ``raw`` is (key, value) junk."""
    p = producer(bootstrap)
    by_endpoint = {"telemetry": topics.ingest[0], "alarms": topics.ingest[1]}
    for m in msgs:
        p.produce(
            by_endpoint[m.endpoint],
            key=m.device_id.encode(),
            value=envelope(m),
            headers=ingest_headers(m),
        )
    for key, value in raw:
        p.produce(
            topics.ingest[0],
            key=key.encode(),
            value=value,
            headers=[(rh.MESSAGE_ID, b"raw-" + key.encode())],
        )
    assert p.flush(30) == 0


def master(
    bootstrap: str,
    topics: EnricherTopics,
    device_id: str,
    site: str = "plant-1",
    area: str = "A1",
    tenant: str = TENANT,
) -> None:
    """Produce the master record of ``device_id`` of ``tenant`` (key "<tenant>/<device>")."""
    masters(bootstrap, topics, [device_id], site, area, tenant)


def masters(
    bootstrap: str,
    topics: EnricherTopics,
    device_ids: list[str],
    site: str = "plant-1",
    area: str = "A1",
    tenant: str = TENANT,
) -> None:
    """Produce the master record of each of ``device_ids`` with one producer.

    A producer of its own per record waits each time for the broker to grant it an
    idempotent producer id (~0.5 s on a loaded machine).
    """
    p = producer(bootstrap)
    for device_id in device_ids:
        dm = device_master_pb2.DeviceMaster(
            device_id=device_id,
            site=site,
            area_code=area,
            vendor_format="acme.v1+json",
            model="m1",
            tenant=tenant,
        )
        p.produce(
            topics.master, key=scoped_key(tenant, device_id).encode(), value=dm.SerializeToString()
        )
    assert p.flush(30) == 0


def read_all(bootstrap: str, topic: str, idle_s: float = 1.5, timeout_s: float = 30) -> list[Any]:
    """Read every record of ``topic`` once it has been idle for ``idle_s``.

    The topic is read to its end (:func:`headwater.kafka.read.read_topic`), and again after
    ``idle_s``, until a read finds nothing new: side outputs written in the same micro-batch
    as the records a test waited for may still be arriving.
    """
    deadline = time.monotonic() + timeout_s
    records = list(read_topic(bootstrap, topic, timeout_s, require=True))
    while time.monotonic() < deadline:
        time.sleep(idle_s)
        again = list(read_topic(bootstrap, topic, max(1.0, deadline - time.monotonic())))
        if len(again) == len(records):
            break
        records = again
    return records


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """Each partition's end (high watermark) now: where a test's own records will start.

    The suite's tests share the ingest topics; reading only from these offsets on keeps a
    test's reads to what it wrote itself (and what ran beside it), not the session's history.
    """
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "tests-end-offsets"})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return {p: _high_watermark(consumer, topic, p) for p in partitions}
    finally:
        consumer.close()


_NO_LEADER_YET = (KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE)


def _high_watermark(consumer: Consumer, topic: str, partition: int) -> int:
    """The partition's end, asked again while the broker says it has no leader yet.

    A topic the session has just created may have no leader for a moment on a loaded
    machine (NOT_LEADER_FOR_PARTITION): that is waited out, up to 60 s.
    """
    deadline = time.monotonic() + 60
    while True:
        try:
            return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[1]
        except KafkaException as exc:
            if exc.args[0].code() not in _NO_LEADER_YET or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


#: Where each ingest topic's partitions ended when the running test began, by (bootstrap,
#: topic), for the tests whose conftest marks it (``mark_ingest_ends``, the gateway tests,
#: cleared when each ends): the session's ingest topics are shared, and reading them from the
#: start at every poll cost those tests minutes once the suite had filled them.
INGEST_BEGAN: dict[tuple[str, str], dict[int, int]] = {}


def mark_ingest_ends(bootstrap: str) -> None:
    """Record in :data:`INGEST_BEGAN` where every ingest topic of ``bootstrap`` ends now."""
    for topic in INGEST_TOPICS.values():
        INGEST_BEGAN[bootstrap, topic] = end_offsets(bootstrap, topic)


def read_ingest_since_test_began(bootstrap: str, topic: str) -> list[Any]:
    """The records added to the ingest ``topic`` since the running test began, if it was
    marked; else (another folder's test, a cluster of its own) every record of the topic."""
    starts = INGEST_BEGAN.get((bootstrap, topic))
    if starts is None:
        return list(read_topic(bootstrap, topic))
    return read_from(bootstrap, topic, starts)


def read_from(bootstrap: str, topic: str, starts: Mapping[int, int]) -> list[Any]:
    """Every record of ``topic`` from ``starts`` (partition -> offset) to each partition's end."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "tests-read-from", "enable.auto.commit": False}
    )
    out: list[Any] = []
    try:
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in starts
        }
        todo = {p: o for p, o in starts.items() if o < ends[p]}
        consumer.assign([TopicPartition(topic, p, o) for p, o in todo.items()])
        deadline = time.monotonic() + 60
        while todo:
            assert time.monotonic() < deadline, f"{topic} not read to its end within 60 s"
            for msg in consumer.consume(500, 0.5):
                if msg.error():
                    continue
                out.append(msg)
                if msg.offset() + 1 >= ends[msg.partition()]:
                    todo.pop(msg.partition(), None)
    finally:
        consumer.close()
    return out


def acme(temp: float, hum: float) -> bytes:
    return json.dumps({"temp_c": temp, "hum_pct": hum}).encode()


class TopicReader:
    """Reads a topic from the beginning, keeping everything seen so far."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.records: list[Any] = []
        self._c = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"r-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
            }
        )
        meta = self._c.list_topics(topic, timeout=10).topics[topic]
        self._c.assign([TopicPartition(topic, p, 0) for p in meta.partitions])

    def poll(self, seconds: float = 0.2) -> list[Any]:
        new = [m for m in self._c.consume(1000, timeout=seconds) if m.error() is None]
        self.records += new
        return new

    def until(self, done: Any, timeout_s: float, tick: Any = None) -> list[Any]:
        """Poll until ``done(records)`` is true; raise TimeoutError after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while not done(self.records):
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{self.topic}: condition not met with {len(self.records)} records"
                )
            if tick is not None:
                tick()
            self.poll(0.5)
        return self.records

    def close(self) -> None:
        self._c.close()


TERMINAL = {"OUTCOME_ENRICHED", "OUTCOME_DEAD_LETTERED", "OUTCOME_DUPLICATE"}


def completions(records: list[Any]) -> list[Any]:
    from headwater.proto.events.v1 import completion_pb2

    return [completion_pb2.Completion.FromString(m.value()) for m in records]


def outcome(c: Any) -> str:
    from headwater.proto.events.v1 import completion_pb2

    return completion_pb2.Outcome.Name(c.outcome)


def enricher_command(
    bootstrap: str,
    topics: EnricherTopics,
    workdir: Path,
    extra_env: Mapping[str, str] | None = None,
    max_seconds: float = 240,
    **settings: str,
) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of ``headwater enricher run`` on ``topics``.

    ``settings`` are ``HEADWATER_ENRICHER_*`` names without the prefix, e.g.
    ``MAX_ATTEMPTS="2"``; the checkpoint lives in ``workdir/cp``. ``extra_env`` goes on
    top of all (a Spark cluster's master and submit arguments); the run stops by itself
    after ``max_seconds``.
    """
    p = "HEADWATER_ENRICHER_"
    env = os.environ | {
        "PYSPARK_PYTHON": sys.executable,
        "HEADWATER_KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        p + "TOPIC_PREFIX": topics.completions.removesuffix("completions.v1"),
        p + "CHECKPOINT_LOCATION": str(workdir / "cp"),
        p + "STARTING_OFFSETS": "earliest",
        p + "SPARK_MASTER": "local[2]",
        p + "SHUFFLE_PARTITIONS": "2",
        **{p + k: v for k, v in settings.items()},
        **(extra_env or {}),
    }
    argv = [sys.executable, "-m", "headwater.enricher", "run", "--max-seconds", str(max_seconds)]
    return argv, env


def start_enricher(
    bootstrap: str,
    topics: EnricherTopics,
    workdir: Path,
    log_name: str,
    extra_env: Mapping[str, str] | None = None,
    max_seconds: float = 240,
    **settings: str,
) -> subprocess.Popen[bytes]:
    """Run ``headwater enricher run`` on ``topics`` as its own process group (for SIGKILL)."""
    argv, env = enricher_command(bootstrap, topics, workdir, extra_env, max_seconds, **settings)
    return launch(argv, env=env, stdout=subprocess.PIPE, stderr=(workdir / log_name).open("ab"))


def committed_past(checkpoint: str, topic: str, offset: int) -> bool:
    """Return True once the query's checkpoint committed a batch that ends at ``offset`` or later.

    Completions are visible as soon as a task's sink wrote them, before Spark commits the
    batch; a test that stops the query then makes it replay the batch on the next start.
    """
    from headwater.ops.checkpoint import CheckpointError, read_checkpoint

    try:
        rows = read_checkpoint(checkpoint).rows()
    except CheckpointError:
        return False
    return any(r["topic"] == topic and int(str(r["next_offset"])) >= offset for r in rows)
