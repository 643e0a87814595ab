"""Read a topic from its log start to its end: the one reader of ops, the dev stack and tests.

The end is each partition's high watermark, taken when the read begins; records appended
later are not read. Partitions are assigned, never subscribed: no group is joined and no
offset committed. librdkafka still wants a ``group.id``, so the caller's role is given as
one; it names who read, nothing more (no member shows up in ``kafka-consumer-groups``).

A partition is done once the consumer's position passes its end, not when a record at
``end - 1`` arrives: compaction and transaction markers leave gaps in offsets, and a read
waiting for an offset that no longer exists would only stop at its deadline.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from headwater.errors import HeadwaterError
from headwater.kafka.settings import KafkaSettings, resolve_kafka

#: Where the client's own log lines go: nowhere a person reads. A read that fails says why in
#: one ReadError (the client would log every reconnect attempt to stderr).
_CLIENT_LOG = logging.getLogger("headwater.kafka.read.client")
_CLIENT_LOG.addHandler(logging.NullHandler())
_CLIENT_LOG.propagate = False

#: The consumer's prefetch queue per partition and its largest fetch, in KiB: they bound
#: the client's memory (librdkafka's defaults: 64 MiB a partition, fetches of 50 MiB); a
#: few MiB keep a loopback read as fast. A record larger than a fetch is still returned.
PREFETCH_KBYTES = 8192

#: The consumer configuration that bounds its buffers (``PREFETCH_KBYTES``).
BOUNDED_FETCH = {
    "queued.max.messages.kbytes": PREFETCH_KBYTES,
    "fetch.max.bytes": PREFETCH_KBYTES * 1024,
}

#: The ``client.id`` role (and never-joined ``group.id``) of a read that names no other.
READ_ROLE = "headwater-read"

#: Answers of a partition whose leader is still being elected (a topic created a moment
#: ago, or its leader just lost): librdkafka does not flag all of them retriable, but they
#: pass once it is elected. _DESTROY_BROKER: the query was on its way to a broker that died.
_ELECTING = {
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._TIMED_OUT,
    KafkaError._DESTROY_BROKER,
    # A new leader answers this until its high watermark has caught up (KIP-207).
    KafkaError.OFFSET_NOT_AVAILABLE,
}

#: Errors a consume reports that librdkafka recovers from by itself (it reconnects).
_TRANSIENT = {
    KafkaError._TRANSPORT,
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError._PARTITION_EOF,
    KafkaError._TIMED_OUT,
}


class ReadError(HeadwaterError, RuntimeError):
    """A topic could not be read to its end; the message says which and why."""


class TopicMissingError(ReadError):
    """The topic does not exist (only raised when the caller requires it)."""


def read_topic(
    kafka: KafkaSettings | str,
    topic: str,
    timeout_s: float = 60.0,
    *,
    client_role: str = READ_ROLE,
    require: bool = False,
    connect_timeout_s: float = 15.0,
) -> Iterator[Message]:
    """Yield every record of ``topic`` from the log start to its end (the high watermark).

    Records come in offset order within a partition; partitions interleave.

    Args:
        kafka: The connection (bootstrap servers alone: security from ``HEADWATER_KAFKA_*``).
        topic: The topic to read.
        timeout_s: How long the read may go without a record (not counting the time the
            caller spends between records: a long topic streamed to a slow reader is fine).
        client_role: Who reads: ``client.id`` role and the (never joined) ``group.id``.
        require: Raise :class:`TopicMissingError` when the topic does not exist (else: no records).
        connect_timeout_s: How long to wait for the cluster's first answer (its metadata).

    Raises:
        TopicMissingError: ``require`` and the topic does not exist.
        ReadError: The cluster did not answer within ``connect_timeout_s``, the end was not
            reached within ``timeout_s``, or the broker refused the read (authorization, a
            fatal client error).
    """
    settings = resolve_kafka(kafka)
    errors: list[str] = []
    consumer = Consumer(
        settings.consumer_config(client_role, client_role)
        | BOUNDED_FETCH
        | {
            # From the log start; should retention delete records under the read, from the
            # new start.
            "auto.offset.reset": "earliest",
            "logger": _CLIENT_LOG,
            "error_cb": lambda err: errors.append(err.str()),
        }
    )
    deadline = time.monotonic() + timeout_s
    try:
        try:
            wait = min(connect_timeout_s, timeout_s)
            metadata = consumer.list_topics(topic, timeout=wait).topics.get(topic)
        except KafkaException as exc:
            consumer.poll(0)  # serve the queued error callbacks: they say why
            why = errors[-1] if errors else exc.args[0].str()
            raise ReadError(
                f"could not reach Kafka at {settings.bootstrap_servers} within {wait:.0f} s: {why}"
            ) from None
        if metadata is None or metadata.error is not None:
            if require:
                raise TopicMissingError(
                    f"topic {topic} does not exist on {settings.bootstrap_servers}: create it "
                    "with `headwater topics ensure` (or check the topic prefix)"
                )
            return
        ends: dict[int, int] = {}
        assignment = []
        for partition in metadata.partitions:
            low, high = _watermarks(consumer, TopicPartition(topic, partition), deadline)
            assignment.append(TopicPartition(topic, partition, low))
            if high > low:
                ends[partition] = high
        if not ends:
            return
        consumer.assign(assignment)
        while ends:
            if time.monotonic() > deadline:
                raise ReadError(
                    f"reading {topic}: no record for {timeout_s:.0f} s before its end "
                    f"(partitions not done: {sorted(ends)})"
                )
            for msg in consumer.consume(1000, 0.2):
                error = msg.error()
                if error is not None:
                    if error.fatal() or error.code() not in _TRANSIENT:
                        raise ReadError(f"reading {topic}: {error.str()}")
                    continue
                if (msg.offset() or 0) < ends.get(msg.partition() or 0, 0):
                    yield msg
                    deadline = time.monotonic() + timeout_s
            for tp in consumer.position([TopicPartition(topic, p) for p in list(ends)]):
                if tp.offset >= ends[tp.partition]:
                    ends.pop(tp.partition)
    finally:
        consumer.close()


def _watermarks(consumer: Any, tp: TopicPartition, deadline: float) -> tuple[int, int]:
    """Return (low, high) of a partition, retrying while its leader is being elected.

    Raises:
        ReadError: The broker refused, or no leader was elected before ``deadline``.
    """
    while True:
        try:
            low, high = consumer.get_watermark_offsets(tp, timeout=10)
            return int(low), int(high)
        except KafkaException as exc:
            error = exc.args[0]
            waiting = error.retriable() or error.code() in _ELECTING
            if not waiting or time.monotonic() > deadline:
                raise ReadError(f"reading {tp.topic}[{tp.partition}]: {error.str()}") from None
            time.sleep(0.2)
