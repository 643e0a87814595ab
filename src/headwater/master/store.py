"""The master-data topic: read its current records, plan changes, write them.

The topic is compacted and keyed ``<tenant>/<device_id>``: the newest record of a key is
the device's master data, an empty value (a tombstone) deletes it. Writes use the shared
producer configuration (acks=all, idempotence, the one partitioner), so a device's master
record lands on the partition every other client computes for its key.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from headwater.errors import HeadwaterError
from headwater.kafka.settings import KafkaSettings
from headwater.proto.master.v1.device_master_pb2 import DeviceMaster
from headwater.topics import MASTER_DEVICES_TOPIC, scoped_key, split_scoped_key

#: ``client.id`` role of this tool's clients.
CLIENT_ROLE = "headwater-master"


class MasterStoreError(HeadwaterError, RuntimeError):
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
    from headwater.kafka.read import ReadError, read_topic

    current: dict[str, DeviceMaster] = {}
    try:
        for msg in read_topic(
            kafka, topic, timeout_s, client_role=f"{CLIENT_ROLE}-reader", require=True
        ):
            key = (msg.key() or b"").decode("utf-8", "replace")
            value = msg.value()
            if value:
                current[key] = DeviceMaster.FromString(value)
            else:
                current.pop(key, None)
    except ReadError as exc:
        raise MasterStoreError(str(exc)) from None
    return current


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
