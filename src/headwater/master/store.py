"""The master-data topic: read its current records, plan changes, write them.

The topic is compacted and keyed ``<tenant>/<device_id>``: the newest record of a key is
the device's master data, an empty value (a tombstone) deletes it. Writes use the shared
producer configuration (acks=all, idempotence, the one partitioner), so a device's master
record lands on the partition every other client computes for its key.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from headwater.kafka.settings import KafkaSettings
from headwater.proto.master.v1.device_master_pb2 import DeviceMaster
from headwater.topics import MASTER_DEVICES_TOPIC, scoped_key, split_scoped_key

#: ``client.id`` role of this tool's clients.
CLIENT_ROLE = "headwater-master"


class MasterStoreError(RuntimeError):
    """The topic cannot be read or written; the message says what to do."""


def master_topic(prefix: str = "") -> str:
    """Return the master-data topic's name with the deployment's prefix."""
    return prefix + MASTER_DEVICES_TOPIC


def read_current(
    kafka: KafkaSettings, topic: str, timeout_s: float = 60.0
) -> dict[str, DeviceMaster]:
    """Return the current master record of every key (the log read to its end, compacted).

    Raises:
        MasterStoreError: the topic does not exist, or the end is not reached in time.
    """
    from confluent_kafka import Consumer, TopicPartition

    # Partitions are assigned, never a group joined: librdkafka wants a group id anyway.
    consumer = Consumer(kafka.consumer_config(CLIENT_ROLE, f"{CLIENT_ROLE}-reader"))
    current: dict[str, DeviceMaster] = {}
    try:
        metadata = consumer.list_topics(topic, timeout=15).topics.get(topic)
        if metadata is None or metadata.error is not None:
            raise MasterStoreError(
                f"topic {topic} does not exist on {kafka.bootstrap_servers}: create it with "
                "`headwater topics ensure` (or check --topic-prefix)"
            )
        deadline = time.monotonic() + timeout_s
        ends: dict[int, int] = {}
        assignment = []
        for partition in metadata.partitions:
            low, high = _watermarks(consumer, TopicPartition(topic, partition), deadline)
            assignment.append(TopicPartition(topic, partition, low))
            if high > low:
                ends[partition] = high
        consumer.assign(assignment)
        while ends:
            if time.monotonic() > deadline:
                raise MasterStoreError(
                    f"reading {topic} did not reach its end in {timeout_s:.0f} s"
                )
            for msg in consumer.consume(1000, 0.5):
                if msg.error():
                    raise MasterStoreError(f"reading {topic}: {msg.error()}")
                key = (msg.key() or b"").decode("utf-8", "replace")
                value = msg.value()
                if value:
                    current[key] = DeviceMaster.FromString(value)
                else:
                    current.pop(key, None)
            # Compaction leaves gaps in offsets: done once the position passed the end.
            for tp in consumer.position([TopicPartition(topic, p) for p in list(ends)]):
                if tp.offset >= ends[tp.partition]:
                    ends.pop(tp.partition)
    finally:
        consumer.close()
    return current


def _watermarks(consumer: Any, tp: Any, deadline: float) -> tuple[int, int]:
    """Return (low, high) of a partition, retrying while it has no leader yet.

    A topic created a moment ago (``topics ensure`` just before a load) answers
    NOT_LEADER_FOR_PARTITION until its leader is elected: retriable, so retried.
    """
    from confluent_kafka import KafkaError, KafkaException

    # librdkafka does not flag these retriable here, but they pass once a leader is elected.
    electing = {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._TIMED_OUT,
    }
    while True:
        try:
            low, high = consumer.get_watermark_offsets(tp, timeout=10)
            return int(low), int(high)
        except KafkaException as exc:
            error = exc.args[0]
            waiting = error.retriable() or error.code() in electing
            if not waiting or time.monotonic() > deadline:
                raise MasterStoreError(
                    f"reading {tp.topic}[{tp.partition}]: {error.str()}"
                ) from None
            time.sleep(0.2)


@dataclass
class Plan:
    """What a load changes: records to write (new or changed) and keys to delete."""

    added: list[DeviceMaster] = field(default_factory=list)
    updated: list[DeviceMaster] = field(default_factory=list)
    unchanged: list[DeviceMaster] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        """The summary: how many of each."""
        return {
            "added": len(self.added),
            "updated": len(self.updated),
            "unchanged": len(self.unchanged),
            "deleted": len(self.deleted),
        }


def plan(
    current: Mapping[str, DeviceMaster], desired: Iterable[DeviceMaster], prune: bool = False
) -> Plan:
    """Compare ``desired`` records with the topic's ``current`` ones.

    Args:
        current: The topic's records by key (:func:`read_current`).
        desired: The records the files hold.
        prune: also delete devices of the tenants in ``desired`` that it does not list
            (the files are then the whole master data of those tenants; other tenants'
            devices are never touched).
    """
    result = Plan()
    wanted: dict[str, DeviceMaster] = {}
    for record in desired:
        key = scoped_key(record.tenant, record.device_id)
        wanted[key] = record
        before = current.get(key)
        if before is None:
            result.added.append(record)
        elif before == record:
            result.unchanged.append(record)
        else:
            result.updated.append(record)
    if prune:
        tenants = {r.tenant for r in wanted.values()}
        result.deleted = sorted(
            k for k in current if k not in wanted and split_scoped_key(k)[0] in tenants
        )
    return result


def write(
    kafka: KafkaSettings,
    topic: str,
    records: Iterable[DeviceMaster] = (),
    deletes: Iterable[str] = (),
    timeout_s: float = 30.0,
) -> int:
    """Write ``records`` and tombstones for the keys ``deletes``; return how many were written.

    Returns only when the broker acknowledged every record (acks=all).

    Raises:
        MasterStoreError: a record was refused, or not acknowledged within ``timeout_s``.
    """
    from confluent_kafka import KafkaError, Message, Producer

    producer = Producer(kafka.producer_config(CLIENT_ROLE))
    failures: list[str] = []

    def delivered(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            failures.append(f"{(msg.key() or b'').decode()}: {err.str()}")

    def send(key: str, value: bytes | None) -> None:
        while True:
            try:
                producer.produce(topic, value, key, on_delivery=delivered)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.5)
        producer.poll(0)

    sent = 0
    for record in records:
        send(scoped_key(record.tenant, record.device_id), record.SerializeToString())
        sent += 1
    for key in deletes:
        send(key, None)
        sent += 1
    if producer.flush(timeout_s):
        raise MasterStoreError(f"{topic}: not every record was acknowledged in {timeout_s:.0f} s")
    if failures:
        raise MasterStoreError(f"{topic}: {len(failures)} record(s) refused, first: {failures[0]}")
    return sent


def apply(kafka: KafkaSettings, topic: str, changes: Plan) -> int:
    """Write what ``changes`` adds, updates and deletes; unchanged records are not rewritten."""
    return write(kafka, topic, [*changes.added, *changes.updated], changes.deleted)
