"""The default RecordWriter: one confluent-kafka (librdkafka) producer per process.

Chosen by measurement over ``AiokafkaWriter`` (``HEADWATER_INGEST_PRODUCER``): aiokafka's
pure-Python record path was ~45% of the server's CPU for batches, and capped batched ingest
at 69-75% of a raw aiokafka producer; with librdkafka the same runs reached 109-138%
(docs/benchmarks.md). librdkafka builds and sends batches in C threads; delivery reports
are served by one poll thread and handed to the event loop in bulk (one
``call_soon_threadsafe`` per poll, not per record). librdkafka's errors become the
service's neutral ``ProduceError`` kinds here (:func:`produce_error`), so the one mapping
to gRPC (``status.from_produce_error``) knows no Kafka client.

A fatal error (librdkafka's ``error_cb`` with ``KafkaError.fatal()``, e.g. the idempotent
producer lost its sequence) leaves the producer unusable: every later produce fails. The
writer then reports itself not connected at once and calls ``on_fatal`` on the event
loop; the server turns health NOT_SERVING and replaces the producer (``rpc/server.py``).

librdkafka's statistics (every second) tell when the producer got its id, and which
partitions have had records waiting longer than a leader election with none acknowledged
(``producer_stats.py``): one log line when a partition stalls, with the producer's state,
and one when it takes writes again. :meth:`ConfluentWriter.producer_state` gives the same
state on demand.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from headwater.ingest.writers.produce_errors import Kind, ProduceError
from headwater.ingest.writers.producer_stats import StallWatch, partitions, producer_state
from headwater.ingest.writers.protocol import Delivered, Headers
from headwater.kafka.diagnose import explain
from headwater.kafka.settings import KafkaSettings

log = logging.getLogger(__name__)


_TIMEOUTS = {KafkaError._MSG_TIMED_OUT, KafkaError._TIMED_OUT}
_TOO_LARGE = {KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE}
_AUTH = {
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    KafkaError.SASL_AUTHENTICATION_FAILED,
    KafkaError._AUTHENTICATION,
}
#: Local conditions that pass: a broker down, the queue full, the producer being replaced
#: (_FATAL: a new instance writes the resend), records purged at a replacement.
_RETRIABLE = {
    KafkaError._TRANSPORT,
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError._QUEUE_FULL,
    KafkaError._FATAL,
    KafkaError._PURGE_QUEUE,
    KafkaError._PURGE_INFLIGHT,
    # Broker errors the Kafka protocol marks retriable (leadership moves, ISR shrinks).
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError.NOT_ENOUGH_REPLICAS,
    KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    KafkaError.NETWORK_EXCEPTION,
    KafkaError.KAFKA_STORAGE_ERROR,
}


def produce_error(err: KafkaError) -> ProduceError:
    """Map a librdkafka error (a delivery report's or produce()'s) to a neutral ProduceError."""
    code, name, text = err.code(), err.name(), err.str()
    if code in _TIMEOUTS:
        return ProduceError(Kind.TIMEOUT, text, name)
    if code in _TOO_LARGE:
        return ProduceError(Kind.TOO_LARGE, text, name)
    if code in _AUTH:
        return ProduceError(Kind.AUTH, text, name)
    if code in _RETRIABLE or err.retriable():
        return ProduceError(Kind.RETRIABLE, text, name)
    return ProduceError(Kind.OTHER, text, name)


class ConfluentWriter:
    """A RecordWriter on one librdkafka producer with acks=all."""

    def __init__(
        self,
        settings: KafkaSettings,
        produce_timeout_s: float,
        queue_limits: tuple[int, int] = (256 * 1024 * 1024, 100_000),
    ) -> None:
        self._settings = settings
        self._timeout_s = produce_timeout_s
        #: (bytes, records) librdkafka may queue: derived from the service's in-flight
        #: bound (``admission.producer_queue_limits``), so its queue cannot outgrow it.
        self._queue_limits = queue_limits
        self._producer: Producer | None = None
        self._unconnected: Producer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._poller: threading.Thread | None = None
        self._stopping = threading.Event()
        self._connected = False
        #: Set once the idempotent producer holds its producer id (from librdkafka's stats).
        self._pid_assigned = threading.Event()
        #: librdkafka's latest statistics, parsed (written by the thread serving stats_cb).
        self._stats: dict[str, Any] = {}
        self._stalls = StallWatch()
        #: The first client error that names a setting (login, TLS), for start()'s error.
        self._explained: str | None = None
        self._acks: list[tuple[asyncio.Future[Delivered], Any, Any]] = []
        #: Every record's future until it is resolved: stop() fails those the producer
        #: never reported, so the bytes admission counts for them are always given back.
        self._unresolved: set[asyncio.Future[Delivered]] = set()
        #: Called on the event loop with the reason after a fatal producer error.
        self.on_fatal: Callable[[str], None] | None = None

    @property
    def connected(self) -> bool:
        """True once the producer has fetched cluster metadata."""
        return self._connected

    async def start(self) -> None:
        """Create the producer and fetch metadata (bounded); raise if unreachable."""
        if self._connected:
            return
        s = self._settings
        # Security, client.id, acks=all, idempotence and the shared partitioner (Java's and
        # aiokafka's key hashing, so a device keeps its partition across clients).
        conf = s.producer_config("headwater-ingest") | {
            # The produce timeout, though an election takes about as long: a record that
            # times out queued makes the idempotent producer drain its requests in flight
            # and bump its epoch, which costs milliseconds and stalls no partition (one bump
            # per leader kill, writes back at the election's end: docs/benchmarks.md). A
            # longer timeout would keep records, and the bytes admission counts for them,
            # past the call's answer, and write them after the gateway was told to resend.
            "message.timeout.ms": int(self._timeout_s * 1000),
            "message.max.bytes": 2 * 1024 * 1024,
            "queue.buffering.max.kbytes": max(1, -(-self._queue_limits[0] // 1024)),
            "queue.buffering.max.messages": max(1, self._queue_limits[1]),
            # librdkafka's own log lines (e.g. "broker down") go through Python logging as
            # JSON, served by the poll thread, instead of raw lines on stderr.
            "logger": log,
            # Client errors (fatal ones included) come here, served by the poll thread.
            "error_cb": self.error_callback,
            # The only public sign that the idempotent producer got its producer id
            # (librdkafka's finest granularity is 1 s; see _wait_producer_id), and what
            # tells a stalled partition (producer_stats.py).
            "statistics.interval.ms": 1000,
            "stats_cb": self._on_stats,
        }
        # One producer across start attempts: a service started during an outage retries
        # start() and must not leave a librdkafka instance (and its threads) per attempt.
        producer = self._unconnected = self._unconnected or Producer(conf)
        loop = asyncio.get_running_loop()
        timeout = self._timeout_s
        try:
            await loop.run_in_executor(None, lambda: producer.list_topics(timeout=timeout))
        except KafkaException as exc:
            # A refused login or an untrusted certificate reaches only error_cb: serve it,
            # so the error names the setting to fix instead of "transport failure".
            producer.poll(0)
            raise ProduceError(Kind.RETRIABLE, self._explained or str(exc), "_TRANSPORT") from exc
        await loop.run_in_executor(None, lambda: self._wait_producer_id(producer, timeout))
        self._producer, self._loop, self._unconnected = producer, loop, None
        self._stopping.clear()
        self._poller = threading.Thread(target=self._poll, name="confluent-acks", daemon=True)
        self._poller.start()
        self._connected = True

    def _wait_producer_id(self, producer: Producer, timeout_s: float) -> None:
        """Wait until the producer holds its producer id; raise a retriable error if not.

        Metadata alone is not ready: an idempotent producer writes nothing until a broker
        hands it a producer id, and a broker still loading its coordinator state ("Coordinator
        load in progress", right after a restart or a freeze) makes it wait. Serving before
        then would accept frames that can only time out (issue 36).
        """
        deadline = time.monotonic() + timeout_s
        while not self._pid_assigned.is_set():
            if time.monotonic() > deadline:
                raise ProduceError(
                    Kind.RETRIABLE,
                    "no producer id from the cluster yet (a broker may still be loading its "
                    "coordinator state)",
                    "_PID",
                )
            producer.poll(0.1)  # serves stats_cb before the poll thread runs

    def _on_stats(self, stats_json: str) -> None:
        """Read librdkafka's statistics (every second): the producer id, stalled partitions."""
        stats = self._stats = json.loads(stats_json)
        if (stats.get("eos") or {}).get("idemp_state") == "Assigned":
            self._pid_assigned.set()
        stalled, recovered = self._stalls.update(partitions(stats))
        if stalled:
            log.error(
                "a Kafka partition has taken none of ingest's writes for longer than a leader "
                "election: records waited and none was acknowledged",
                extra={
                    "partitions": sorted(stalled),
                    "waited_s": round(max(stalled.values()), 1),
                    "producer": producer_state(stats, set(stalled)),
                },
            )
        if recovered:
            log.info(
                "a stalled Kafka partition takes ingest's writes again",
                extra={"partitions": sorted(recovered)},
            )

    def producer_state(self, names: set[str] | None = None) -> dict[str, Any]:
        """The producer's state in its latest statistics (``producer_stats.producer_state``).

        Args:
            names: the partitions (``topic[partition]``) to describe; None: every one.
        """
        return producer_state(self._stats, names)

    def error_callback(self, err: KafkaError) -> None:
        """Handle an error librdkafka reports outside any one record (its ``error_cb``).

        Called from the poll thread. Non-fatal errors (a broker down, a transport error)
        are retried by librdkafka itself and only logged. A fatal one marks the writer
        not connected (calls are refused UNAVAILABLE from now on) and hands the reason
        to ``on_fatal`` on the event loop.

        Args:
            err: The error; ``err.fatal()`` (code ``_FATAL``) means the producer is dead.
        """
        self._explained = self._explained or explain(err.str(), err.code())
        if not (err.fatal() or err.code() == KafkaError._FATAL):
            log.warning("Kafka client error", extra={"error": err.str(), "code": err.name()})
            return
        reason = f"{err.name()}: {err.str()}"
        log.error(
            "fatal Kafka producer error: this producer can write nothing more",
            extra={"error": reason},
        )
        self._connected = False
        loop, on_fatal = self._loop, self.on_fatal
        if loop is not None and on_fatal is not None and not loop.is_closed():
            loop.call_soon_threadsafe(on_fatal, reason)

    def _poll(self) -> None:
        """Serve delivery reports; hand each poll's acks to the loop in one call."""
        producer, loop = self._producer, self._loop
        assert producer is not None and loop is not None
        while not self._stopping.is_set():
            producer.poll(0.05)
            if self._acks:
                acks, self._acks = self._acks, []
                loop.call_soon_threadsafe(self._resolve, acks)

    async def send(
        self, topic: str, key: bytes, value: bytes, headers: Headers
    ) -> asyncio.Future[Delivered]:
        """Queue one record; the future resolves with its partition and offset."""
        while True:
            future = self.send_now(topic, key, value, headers)
            if future is not None:
                return future
            await asyncio.sleep(0.005)  # librdkafka's queue is full: wait for acks to drain it

    def send_now(
        self, topic: str, key: bytes, value: bytes, headers: Headers
    ) -> asyncio.Future[Delivered] | None:
        """Queue one record unless librdkafka's queue is full (then None)."""
        producer = self._producer
        if producer is None or self._loop is None:
            raise ProduceError(Kind.RETRIABLE, "the producer is not started", "NOT_STARTED")
        future: asyncio.Future[Delivered] = self._loop.create_future()

        def delivered(err: Any, msg: Any) -> None:
            self._acks.append((future, err, msg))

        try:
            producer.produce(topic, value, key, headers=list(headers), on_delivery=delivered)
        except BufferError:
            return None
        except KafkaException as exc:  # e.g. _FATAL: mapped as delivery errors are
            raise produce_error(exc.args[0]) from exc
        # Left by _resolve (not by a done callback: that would be one more event-loop
        # callback per record). Delivery reports reach _resolve on this loop, so after this.
        self._unresolved.add(future)
        return future

    async def stop(self, timeout_s: float) -> None:
        """Flush what is queued for at most ``timeout_s``, then stop (idempotent)."""
        producer, self._producer, self._connected = self._producer, None, False
        if producer is None:
            return
        loop = asyncio.get_running_loop()
        # Stop the poll thread first, so flush() below is the only one serving callbacks.
        self._stopping.set()
        if self._poller is not None:
            await loop.run_in_executor(None, self._poller.join, 1.0)
        left = await loop.run_in_executor(None, producer.flush, timeout_s)
        if left:
            log.error(
                "producer flush did not finish in time; unacknowledged records were never "
                "answered OK, so gateways will resend them",
                extra={"timeout_s": timeout_s, "unflushed": left},
            )
        if left:
            # Drop what is left (a fatal error's replacement flushes for 1 s only) so no
            # delivery report arrives after this writer is gone.
            producer.purge()
            producer.poll(0)
        acks, self._acks = self._acks, []
        self._resolve(acks)
        # Whatever librdkafka never reported (purged without a report, or lost with a dead
        # instance) fails retriable: its bytes are released and the gateway resends.
        for future in list(self._unresolved):
            if not future.done():
                future.set_exception(
                    ProduceError(
                        Kind.RETRIABLE,
                        "the producer stopped before this record was acknowledged; resend it",
                        "_PURGE_QUEUE",
                    )
                )
        self._unresolved.clear()

    def _resolve(self, acks: list[tuple[asyncio.Future[Delivered], Any, Any]]) -> None:
        """Settle the futures of one poll's delivery reports (on the event loop)."""
        unresolved = self._unresolved
        for future, err, msg in acks:
            unresolved.discard(future)
            if future.done():
                continue
            if err is not None:
                future.set_exception(produce_error(err))
            else:
                future.set_result(Delivered(msg.topic(), msg.partition(), msg.offset()))
