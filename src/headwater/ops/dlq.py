"""Dead letters: stream them decoded, filter them, and redrive them to their ingest topic.

Every command streams the dead-letter topic: memory stays bounded by the number of
distinct messages selected (a 16-byte digest each, for "latest letter per message" and
redrive), never by the topic's bytes.

A redrive writes the original record value and headers back to the topic it was read
from, with the same message id and audit headers (who, when, why, how many redrives so
far). The enricher deduplicates a redriven record by its message id and redrive count, so
a redrive is processed once even though the message id was seen before. If it fails again
it lands in the dead letters again, carrying the redrive history: a person redrives,
never a loop.

"Redriven already" is decided per source message (tenant, device, message id): a message
counts as redriven when a record carrying ``redrive-count`` with its identity sits in the
source partition at or after the source of its oldest selected letter. A redrive goes to
the original's partition, so it is found there cheaply; a letter left by a redrive that
failed again has that redrive as its source, so it counts too: a second run selects 0
until forced. The horizon is the ingest topic's retention.
"""

from __future__ import annotations

import hashlib
import itertools
import string
import sys
import time
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from headwater import record_headers as rh
from headwater.errors import HeadwaterError
from headwater.kafka.read import BOUNDED_FETCH, read_topic
from headwater.kafka.settings import KafkaSettings, resolve_kafka
from headwater.ops.progress import Progress
from headwater.ops.render import escape
from headwater.proto.events.v1 import dead_letter_pb2
from headwater.topics import DEADLETTER_TOPIC, INGEST_TOPICS

_PRINTABLE = set(string.printable.encode())

#: How long a dlq command waits for the cluster's first answer before it says so.
CONNECT_TIMEOUT_S = 5.0


#: A source message as a 16-byte digest of (tenant, device, message id): fixed size in
#: memory however long the ids.
MessageKey = bytes


def _header(headers: Iterable[tuple[str, str | bytes | None]], name: str) -> bytes:
    """Return the last value of header ``name``, or b""."""
    values = [v.encode() if isinstance(v, str) else v or b"" for k, v in headers if k == name]
    return values[-1] if values else b""


def message_key(tenant: bytes, device: bytes, message_id: bytes, value: bytes) -> MessageKey:
    """Return the identity of a source message (its value's digest when it has no id)."""
    parts = (tenant, device, message_id or hashlib.blake2b(value, digest_size=16).digest())
    return hashlib.blake2b(b"\0".join(parts), digest_size=16).digest()


@dataclass(frozen=True)
class DeadLetterRecord:
    """A dead letter and where it sits in the dead-letter topic."""

    letter: dead_letter_pb2.DeadLetter
    partition: int
    offset: int

    @property
    def tenant(self) -> str:
        """The tenant of the source message: the ``tenant`` header ingest wrote on it."""
        headers = [(h.key, h.value) for h in self.letter.original_headers]
        return _header(headers, rh.TENANT).decode(errors="replace")

    @property
    def message(self) -> MessageKey:
        """The source message this letter is about (``message_key``)."""
        letter = self.letter
        headers = [(h.key, h.value) for h in letter.original_headers]
        message_id = letter.message_id.encode() or _header(headers, rh.MESSAGE_ID)
        return message_key(
            _header(headers, rh.TENANT),
            letter.device_id.encode(),
            message_id,
            letter.original_value,
        )

    def as_row(self) -> dict[str, object]:
        """Return the fields an operator looks at first."""
        letter = self.letter
        return {
            "offset": f"{self.partition}:{self.offset}",
            "time": letter.dead_lettered_time.ToDatetime(UTC).isoformat(timespec="seconds"),
            "reason": letter.reason,
            "stage": letter.stage,
            "tenant": self.tenant,
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
    kafka: KafkaSettings | str,
    topic: str = DEADLETTER_TOPIC,
    *,
    require: bool = False,
    progress: Progress | None = None,
) -> Iterator[DeadLetterRecord]:
    """Yield every dead letter of ``topic``, decoded, as it is read (a string: bootstrap servers).

    Raises:
        TopicMissingError: ``require`` and ``topic`` does not exist.
        ReadError: The cluster did not answer, or the read stalled.
    """
    records = read_topic(
        resolve_kafka(kafka),
        topic,
        require=require,
        connect_timeout_s=CONNECT_TIMEOUT_S,
    )
    for read, msg in enumerate(records, 1):
        if progress:
            progress.report(read, "dead letters read")
        yield DeadLetterRecord(
            dead_letter_pb2.DeadLetter.FromString(msg.value() or b""),
            msg.partition() or 0,
            msg.offset() or 0,
        )


@dataclass(frozen=True)
class Filters:
    """What an operator selects dead letters by; a field left unset selects all."""

    reason: str | None = None
    tenant: str | None = None
    device: str | None = None
    message_ids: frozenset[str] | None = None
    since: datetime | None = None
    until: datetime | None = None

    def match(self, record: DeadLetterRecord) -> bool:
        """Return whether ``record`` passes every given filter."""
        letter = record.letter
        when = letter.dead_lettered_time.ToDatetime(UTC)
        return not (
            (self.reason and letter.reason != self.reason)
            or (self.tenant is not None and record.tenant != self.tenant)
            or (self.device and letter.device_id != self.device)
            or (self.message_ids is not None and letter.message_id not in self.message_ids)
            or (self.since and when < self.since)
            or (self.until and when > self.until)
        )


@dataclass(frozen=True)
class DeadLetters:
    """The selected dead letters of a topic: each iteration streams the topic anew.

    Iterable more than once (``latest_per_message`` and ``redrive`` read twice); letters
    appended between two reads are seen by the second only.
    """

    kafka: KafkaSettings | str
    topic: str = DEADLETTER_TOPIC
    filters: Filters = Filters()
    progress: Progress | None = None

    def __iter__(self) -> Iterator[DeadLetterRecord]:
        records = read_dead_letters(self.kafka, self.topic, require=True, progress=self.progress)
        return (r for r in records if self.filters.match(r))


@dataclass(frozen=True, slots=True)
class _Latest:
    """Where the latest letter of a message sits, and where its source record was read."""

    partition: int
    offset: int
    source_topic: str
    source_partition: int
    source_offset: int


def _latest_letters(letters: Iterable[DeadLetterRecord]) -> dict[MessageKey, _Latest]:
    """Read ``letters`` once; return the latest letter of each source message.

    The dead letters of a message share its device key, hence a partition, so the latest
    is the one read last.
    """
    latest: dict[MessageKey, _Latest] = {}
    for record in letters:
        source = record.letter.source
        latest[record.message] = _Latest(
            record.partition,
            record.offset,
            sys.intern(source.topic),  # a few topics, not one string per message
            source.partition,
            source.offset,
        )
    return latest


def _only(
    letters: Iterable[DeadLetterRecord], latest: Iterable[_Latest]
) -> Iterator[DeadLetterRecord]:
    """Yield the letters of ``latest`` from a second read of ``letters``, in topic order."""
    chosen = {(x.partition, x.offset) for x in latest}
    return (r for r in letters if (r.partition, r.offset) in chosen)


def latest_per_message(letters: Iterable[DeadLetterRecord]) -> Iterator[DeadLetterRecord]:
    """Yield only the latest letter of each source message, in topic order.

    Two passes over ``letters`` (re-iterable): the first keeps a few numbers per message,
    the second yields the letters found there.
    """
    return _only(letters, _latest_letters(letters).values())


def limited(records: Iterable[DeadLetterRecord], limit: int | None) -> Iterator[DeadLetterRecord]:
    """Yield the first ``limit`` records (all of them when ``limit`` is None)."""
    return itertools.islice(records, limit)


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

#: The producer's local queue, in KiB: a redrive of any size holds at most this much
#: unacknowledged (librdkafka's default is 1 GiB); ``_produce`` waits for room.
QUEUE_KBYTES = 16384


#: Why a letter is not sent again; ``--force`` sends it anyway.
ALREADY_REDRIVEN = "already redriven (add --force to send it again)"


def _redrives_in(
    kafka: KafkaSettings,
    topic: str,
    partition: int,
    start: int,
    wanted: Collection[MessageKey],
    timeout_s: float,
    progress: Progress | None,
) -> set[MessageKey]:
    """Return which of the ``wanted`` messages were redriven in one partition from ``start``.

    A redrive is a record carrying ``redrive-count``; only the identities asked for are
    kept, so memory follows the selection, not the ingest topic.

    Raises:
        RedriveError: The end was not reached within ``timeout_s``.
    """
    # The group is required by librdkafka but never joined: the partition is assigned.
    consumer = Consumer(
        kafka.consumer_config("headwater-dlq", "headwater-dlq-redrive-check") | BOUNDED_FETCH
    )
    found: set[MessageKey] = set()
    checked = 0
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
                checked += 1
                if progress:
                    progress.report(checked, f"{topic}/{partition} records checked for redrives")
                headers: list[tuple[str, bytes]] = msg.headers() or []  # type: ignore[assignment]
                if not _header(headers, rh.REDRIVE_COUNT):
                    continue
                key = message_key(
                    _header(headers, rh.TENANT),
                    msg.key() or b"",
                    _header(headers, rh.MESSAGE_ID),
                    msg.value() or b"",
                )
                if key in wanted:
                    found.add(key)
    finally:
        consumer.close()
    return found


def redriven_already(
    kafka: KafkaSettings | str,
    latest: dict[MessageKey, _Latest],
    timeout_s: float = 120.0,
    progress: Progress | None = None,
) -> set[MessageKey]:
    """Return the source messages of ``latest`` that were redriven already.

    Reads each source partition once, from the oldest source of a latest letter onwards:
    what was ingested there since, which a redrive must be among (it is written to the
    original's partition), the source of a letter a failed redrive left included.

    Raises:
        RedriveError: A partition could not be read to its end in time.
    """
    starts: dict[tuple[str, int], int] = {}
    wanted: dict[tuple[str, int], set[MessageKey]] = {}
    for key, where in latest.items():
        source = (where.source_topic, where.source_partition)
        starts[source] = min(starts.get(source, where.source_offset), where.source_offset)
        wanted.setdefault(source, set()).add(key)
    settings = resolve_kafka(kafka)
    done: set[MessageKey] = set()
    for (topic, partition), start in starts.items():
        done |= _redrives_in(
            settings, topic, partition, start, wanted.pop((topic, partition)), timeout_s, progress
        )
    return done


def redrive(
    kafka: KafkaSettings | str,
    letters: Iterable[DeadLetterRecord],
    by: str,
    why: str,
    dry_run: bool = True,
    now: datetime | None = None,
    ingest_topics: Collection[str] = tuple(INGEST_TOPICS.values()),
    force: bool = False,
    producer_overrides: dict[str, object] | None = None,
    limit: int | None = None,
    progress: Progress | None = None,
) -> Iterator[RedriveResult]:
    """Send the latest dead letter of each message back to the partition it was read from.

    ``letters`` is read more than once (a list, or :class:`DeadLetters`): results stream
    as they are sent. Only records read from one of ``ingest_topics`` are sent (the default
    names, unless the deployment prefixes them); others are reported as skipped, and so are
    messages redriven already (``redriven_already``) unless ``force``. ``limit`` caps the
    letters considered (after the latest per message is taken). ``kafka`` as a string is
    the bootstrap servers (security from ``HEADWATER_KAFKA_*``). The producer is the shared
    keyed-record producer (``KafkaSettings.producer_config``: acks=all, idempotence, the one
    partitioner); the explicit partition (the original's) agrees with the partitioner while
    the topic's partition count is unchanged. ``producer_overrides`` are added to its
    configuration (a smaller local queue, say).

    A redrive of many letters may fill the producer's local queue: it then waits for
    deliveries (up to ``QUEUE_WAIT_S`` without progress) instead of stopping half-sent.

    Raises:
        RedriveError: The check for earlier redrives or the delivery failed (after the
            results of what was handed to the producer).
    """
    now = now or datetime.now(UTC)
    settings = resolve_kafka(kafka)

    latest = _latest_letters(letters)
    redriven: set[MessageKey] = set()
    if not force:
        eligible = {k: x for k, x in latest.items() if x.source_topic in ingest_topics}
        redriven = redriven_already(settings, eligible, progress=progress)
    chosen = limited(_only(letters, latest.values()), limit)
    del latest  # _only keeps the (partition, offset) pairs it needs
    config = (
        settings.producer_config("headwater-dlq-redrive")
        | {"queue.buffering.max.kbytes": QUEUE_KBYTES}
        | (producer_overrides or {})
    )
    producer = None if dry_run else Producer(config)
    failures: list[str] = []
    sent = 0

    def delivered(err: object, _msg: object) -> None:
        if err is not None:
            failures.append(str(err))

    for record in chosen:
        letter = record.letter
        topic = letter.source.topic
        skipped = ""
        if topic not in ingest_topics:
            skipped = "source is not an ingest topic"
        elif not letter.original_value:
            skipped = "no original value"
        elif record.message in redriven:
            skipped = ALREADY_REDRIVEN
        if skipped:
            yield RedriveResult(letter.message_id, letter.device_id, topic, False, skipped)
            continue
        if producer is not None:
            _produce(
                producer,
                topic,
                letter.original_value,
                letter.device_id.encode(),
                letter.source.partition,  # the device's partition: its order, and findable
                headers=_redrive_headers(letter, by, why, now),
                on_delivery=delivered,
            )
            sent += 1
            if failures:
                break  # nothing after a failed delivery is sent (RedriveError below)
            if progress:
                progress.report(sent, "redriven")
        yield RedriveResult(letter.message_id, letter.device_id, topic, not dry_run)
    if producer is not None:
        left = producer.flush(30)
        if left or failures:
            raise RedriveError(
                f"{left + len(failures)} of {sent} redriven records were not "
                f"acknowledged by the broker ({'; '.join(failures[:3]) or 'timeout'}); check "
                "the cluster and run the redrive again (letters redriven already are skipped)"
            )


def _redrive_headers(
    letter: dead_letter_pb2.DeadLetter, by: str, why: str, now: datetime
) -> list[tuple[str, str | bytes | None]]:
    """The original headers and this redrive's audit headers (earlier ones stay: the history)."""
    return [
        *((h.key, h.value) for h in letter.original_headers if h.key != rh.REDRIVE_COUNT),
        (rh.REDRIVE_BY, by.encode()),
        (rh.REDRIVE_AT_MS, str(int(now.timestamp() * 1000)).encode()),
        (rh.REDRIVE_REASON, why.encode()),
        (rh.REDRIVE_COUNT, str(len(letter.redrives) + 1).encode()),
    ]


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
