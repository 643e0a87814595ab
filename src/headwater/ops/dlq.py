"""Dead letters: read them decoded, filter them, and redrive them to their ingest topic.

A redrive writes the original record value and headers back to the topic it was read
from, with the same message id and audit headers (who, when, why, how many redrives so
far). The enricher deduplicates a redriven record by its message id and redrive count, so
a redrive is processed once even though the message id was seen before. If it fails again
it lands in the dead letters again, carrying the redrive history: a person redrives,
never a loop.

A redrive goes to the partition the original record was read from, so it is found again
cheaply: a dead letter counts as redriven already when a record after its original in that
partition carries its message id, tenant, device key and the redrive count this redrive
would write (``redriven_already``; the same identity the enricher deduplicates redrives
by). Such letters are skipped unless forced. The horizon is the ingest topic's retention.
"""

from __future__ import annotations

import string
import time
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from headwater import record_headers as rh
from headwater.errors import HeadwaterError
from headwater.kafka.read import read_topic
from headwater.kafka.settings import KafkaSettings, resolve_kafka
from headwater.ops.render import escape
from headwater.proto.events.v1 import dead_letter_pb2
from headwater.topics import DEADLETTER_TOPIC, INGEST_TOPICS

_PRINTABLE = set(string.printable.encode())


@dataclass(frozen=True)
class DeadLetterRecord:
    """A dead letter and where it sits in the dead-letter topic."""

    letter: dead_letter_pb2.DeadLetter
    partition: int
    offset: int

    def as_row(self) -> dict[str, object]:
        """Return the fields an operator looks at first."""
        letter = self.letter
        return {
            "offset": f"{self.partition}:{self.offset}",
            "time": letter.dead_lettered_time.ToDatetime(UTC).isoformat(timespec="seconds"),
            "reason": letter.reason,
            "stage": letter.stage,
            "device": letter.device_id,
            "message_id": letter.message_id,
            "source": f"{letter.source.topic}/{letter.source.partition}@{letter.source.offset}",
            "attempts": letter.attempts,
            "redrives": len(letter.redrives),
            "error": f"{letter.error_class}: {letter.error_message}"[:120],
        }


def readable(payload: bytes, limit: int = 2000) -> str:
    """Render bytes as text when they are printable, else as hex.

    Text keeps its line ends and tabs; other controls ``string.printable`` lets through
    (carriage return, vertical tab, form feed) are escaped, so a payload cannot overwrite
    what the terminal shows.
    """
    shown = payload[:limit]
    suffix = f" … ({len(payload)} bytes)" if len(payload) > limit else ""
    if all(b in _PRINTABLE for b in shown):
        return escape(shown.decode(), keep="\n\t") + suffix
    return "hex:" + shown.hex(" ") + suffix


def read_dead_letters(
    kafka: KafkaSettings | str, topic: str = DEADLETTER_TOPIC
) -> Iterator[DeadLetterRecord]:
    """Yield every dead letter of ``topic``, decoded (a string: bootstrap servers)."""
    for msg in read_topic(resolve_kafka(kafka), topic):
        yield DeadLetterRecord(
            dead_letter_pb2.DeadLetter.FromString(msg.value() or b""),
            msg.partition() or 0,
            msg.offset() or 0,
        )


def select(
    records: Iterable[DeadLetterRecord],
    reason: str | None = None,
    device: str | None = None,
    message_ids: set[str] | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> list[DeadLetterRecord]:
    """Return the dead letters matching every given filter."""
    chosen = []
    for record in records:
        letter = record.letter
        when = letter.dead_lettered_time.ToDatetime(UTC)
        if reason and letter.reason != reason:
            continue
        if device and letter.device_id != device:
            continue
        if message_ids is not None and letter.message_id not in message_ids:
            continue
        if (since and when < since) or (until and when > until):
            continue
        chosen.append(record)
    return chosen


@dataclass(frozen=True)
class RedriveResult:
    """What a redrive sent (or would send, in a dry run)."""

    message_id: str
    device_id: str
    topic: str
    sent: bool
    skipped_reason: str = ""


class RedriveError(HeadwaterError, RuntimeError):
    """A redrive could not be delivered, or not checked; nothing after the failure was sent."""


#: How long a redrive waits for room in the producer's local queue before it gives up.
QUEUE_WAIT_S = 60.0


#: Why a letter is not sent again; ``--force`` sends it anyway.
ALREADY_REDRIVEN = "already redriven (add --force to send it again)"

#: (tenant, device key, message id, redrive count): a redrive as the enricher identifies it.
_RedriveId = tuple[bytes, bytes, bytes, bytes]


def _header(headers: Iterable[tuple[str, str | bytes | None]], name: str) -> bytes:
    """Return the last value of header ``name``, or b""."""
    values = [v.encode() if isinstance(v, str) else v or b"" for k, v in headers if k == name]
    return values[-1] if values else b""


def _redrive_id(letter: dead_letter_pb2.DeadLetter) -> _RedriveId:
    """Return the identity the next redrive of ``letter`` would carry."""
    headers = [(h.key, h.value) for h in letter.original_headers]
    return (
        _header(headers, rh.TENANT),
        letter.device_id.encode(),
        letter.message_id.encode(),
        str(len(letter.redrives) + 1).encode(),
    )


def _redrives_after(
    kafka: KafkaSettings, topic: str, partition: int, start: int, timeout_s: float
) -> dict[_RedriveId, int]:
    """Return the redriven records of one partition from ``start`` to its current end.

    Returns:
        The identity of each record carrying ``redrive-count``, with its last offset.

    Raises:
        RedriveError: The end was not reached within ``timeout_s``.
    """
    # The group is required by librdkafka but never joined: the partition is assigned.
    consumer = Consumer(kafka.consumer_config("headwater-dlq", "headwater-dlq-redrive-check"))
    found: dict[_RedriveId, int] = {}
    try:
        tp = TopicPartition(topic, partition)
        try:
            low, high = consumer.get_watermark_offsets(tp, timeout=10)
        except KafkaException as exc:  # a partition the topic no longer has, say
            raise RedriveError(
                f"could not look for earlier redrives in {topic}/{partition}: "
                f"{exc.args[0].str() if exc.args else exc}; add --force to send anyway"
            ) from None
        offset = max(start, low)
        if offset >= high:
            return found
        consumer.assign([TopicPartition(topic, partition, offset)])
        deadline = time.monotonic() + timeout_s
        while offset < high:
            if time.monotonic() > deadline:
                raise RedriveError(
                    f"could not read {topic}/{partition} to {high} within {timeout_s:.0f}s "
                    "to look for earlier redrives; run again, or add --force"
                )
            for msg in consumer.consume(500, 0.2):
                if msg.error():
                    continue
                offset = (msg.offset() or 0) + 1
                headers: list[tuple[str, bytes]] = msg.headers() or []  # type: ignore[assignment]
                count = _header(headers, rh.REDRIVE_COUNT)
                if count:
                    tenant, message_id = (
                        _header(headers, rh.TENANT),
                        _header(headers, rh.MESSAGE_ID),
                    )
                    found[(tenant, msg.key() or b"", message_id, count)] = offset - 1
    finally:
        consumer.close()
    return found


def redriven_already(
    kafka: KafkaSettings | str, records: Iterable[DeadLetterRecord], timeout_s: float = 120.0
) -> set[tuple[int, int]]:
    """Return the dead letters (partition, offset) whose next redrive is in the log already.

    Reads each source partition once, from the oldest selected original onwards: what was
    ingested there since, which a redrive must be among (it is written to the original's
    partition).

    Raises:
        RedriveError: A partition could not be read to its end in time.
    """
    by_partition: dict[tuple[str, int], list[DeadLetterRecord]] = {}
    for record in records:
        source = record.letter.source
        by_partition.setdefault((source.topic, source.partition), []).append(record)
    done: set[tuple[int, int]] = set()
    settings = resolve_kafka(kafka)
    for (topic, partition), letters in by_partition.items():
        start = min(r.letter.source.offset for r in letters) + 1
        found = _redrives_after(settings, topic, partition, start, timeout_s)
        for r in letters:
            at = found.get(_redrive_id(r.letter))
            if at is not None and at > r.letter.source.offset:
                done.add((r.partition, r.offset))
    return done


def redrive(
    kafka: KafkaSettings | str,
    records: list[DeadLetterRecord],
    by: str,
    why: str,
    dry_run: bool = True,
    now: datetime | None = None,
    ingest_topics: Collection[str] = tuple(INGEST_TOPICS.values()),
    force: bool = False,
    producer_overrides: dict[str, object] | None = None,
) -> list[RedriveResult]:
    """Send each dead letter's original record back to the partition it was read from.

    Only records read from one of ``ingest_topics`` are sent (the default names, unless
    the deployment prefixes them); others are reported as skipped, and so are letters
    redriven already (``redriven_already``) unless ``force``. ``kafka`` as a string is the
    bootstrap servers (security from ``HEADWATER_KAFKA_*``). The producer is the shared
    keyed-record producer (``KafkaSettings.producer_config``: acks=all, idempotence, the one
    partitioner); the explicit partition (the original's) agrees with the partitioner while
    the topic's partition count is unchanged. ``producer_overrides`` are added to its
    configuration (a smaller local queue, say).

    A redrive of many letters may fill the producer's local queue: it then waits for
    deliveries (up to ``QUEUE_WAIT_S`` without progress) instead of stopping half-sent.

    Raises:
        RedriveError: The check for earlier redrives or the delivery failed.
    """
    now = now or datetime.now(UTC)
    results: list[RedriveResult] = []
    eligible = [
        r for r in records if r.letter.source.topic in ingest_topics and r.letter.original_value
    ]
    settings = resolve_kafka(kafka)
    redriven = set() if force else redriven_already(settings, eligible)
    config = settings.producer_config("headwater-dlq-redrive") | (producer_overrides or {})
    producer = None if dry_run else Producer(config)
    failures: list[str] = []

    def delivered(err: object, _msg: object) -> None:
        if err is not None:
            failures.append(str(err))

    for record in records:
        letter = record.letter
        topic = letter.source.topic
        if topic not in ingest_topics:
            results.append(
                RedriveResult(
                    letter.message_id,
                    letter.device_id,
                    topic,
                    False,
                    "source is not an ingest topic",
                )
            )
            continue
        if not letter.original_value:
            results.append(
                RedriveResult(
                    letter.message_id, letter.device_id, topic, False, "no original value"
                )
            )
            continue
        if (record.partition, record.offset) in redriven:
            results.append(
                RedriveResult(letter.message_id, letter.device_id, topic, False, ALREADY_REDRIVEN)
            )
            continue
        # Earlier audit headers stay (the history); the count is replaced.
        headers: list[tuple[str, str | bytes | None]] = [
            (h.key, h.value) for h in letter.original_headers if h.key != rh.REDRIVE_COUNT
        ]
        headers += [
            (rh.REDRIVE_BY, by.encode()),
            (rh.REDRIVE_AT_MS, str(int(now.timestamp() * 1000)).encode()),
            (rh.REDRIVE_REASON, why.encode()),
            (rh.REDRIVE_COUNT, str(len(letter.redrives) + 1).encode()),
        ]
        if producer is not None:
            _produce(
                producer,
                topic,
                letter.original_value,
                letter.device_id.encode(),
                letter.source.partition,  # the device's partition: its order, and findable
                headers=headers,
                on_delivery=delivered,
            )
            if failures:
                break  # nothing after a failed delivery is sent (RedriveError below)
        results.append(RedriveResult(letter.message_id, letter.device_id, topic, not dry_run))
    if producer is not None:
        left = producer.flush(30)
        sent = sum(r.sent for r in results)
        if left or failures:
            raise RedriveError(
                f"{left + len(failures)} of {sent} redriven records were not acknowledged by "
                f"the broker ({'; '.join(failures[:3]) or 'timeout'}); check the cluster and "
                "run the redrive again (letters redriven already are skipped)"
            )
    return results


def _produce(producer: Producer, *args: object, **kwargs: object) -> None:
    """Produce one record; when the local queue is full, serve deliveries until it has room.

    Serving delivery reports (``poll``) after each record also keeps the queue from filling
    with reports nobody reads.

    Raises:
        RedriveError: no room in ``QUEUE_WAIT_S``: the broker does not take what is queued.
    """
    deadline = time.monotonic() + QUEUE_WAIT_S
    while True:
        try:
            producer.produce(*args, **kwargs)  # type: ignore[arg-type]
        except BufferError:
            if time.monotonic() > deadline:
                raise RedriveError(
                    f"the producer's local queue stayed full for {QUEUE_WAIT_S:.0f}s: the "
                    "broker is not taking records; check the cluster and run the redrive again"
                ) from None
            producer.poll(0.5)
            continue
        producer.poll(0)
        return
