"""The aiokafka writer: one long-lived aiokafka producer per process.

A ``RecordWriter`` (``protocol.py``), chosen by ``HEADWATER_INGEST_PRODUCER=aiokafka``;
the default is ``confluent_writer.py``. Every await that can touch the network is bounded:
aiokafka waits forever on a dead broker otherwise. Each writer reports failures as the
service's neutral ``ProduceError`` (``produce_errors.py``); this one maps aiokafka's
exception classes in :func:`produce_error`.
"""

from __future__ import annotations

import asyncio
import functools
import logging

from aiokafka import AIOKafkaProducer
from aiokafka import errors as kafka_errors
from aiokafka.structs import RecordMetadata

from headwater.ingest.writers.produce_errors import Kind, ProduceError
from headwater.ingest.writers.protocol import Delivered, Headers
from headwater.kafka.settings import KafkaSettings

log = logging.getLogger(__name__)


class AiokafkaWriter:
    """A RecordWriter on one aiokafka producer with acks=all."""

    def __init__(
        self, settings: KafkaSettings, produce_timeout_s: float, max_batch_bytes: int = 16384
    ) -> None:
        self._settings = settings
        self._timeout_s = produce_timeout_s
        #: aiokafka holds one open batch per partition and makes send() wait while it is
        #: full, so its queue is bounded by partitions x this size (set from the
        #: service's in-flight bound by ``server.create_writer``).
        self._max_batch_bytes = max_batch_bytes
        self._producer: AIOKafkaProducer | None = None
        self._connected = False

    @property
    def connected(self) -> bool:
        """True once the producer has fetched cluster metadata."""
        return self._connected

    async def start(self) -> None:
        """Create and connect the producer (idempotent); raise if unreachable."""
        if self._connected:
            return
        s = self._settings
        producer = AIOKafkaProducer(
            acks="all",
            enable_idempotence=True,
            linger_ms=s.linger_ms,
            compression_type=None if s.compression_type == "none" else s.compression_type,
            request_timeout_ms=int(self._timeout_s * 1000),
            max_request_size=2 * 1024 * 1024,
            max_batch_size=self._max_batch_bytes,
            # Bootstrap, client_id and security; aiokafka's default partitioner is the
            # murmur2 hash of KafkaSettings.PARTITIONER already.
            **s.aiokafka_config("headwater-ingest"),
        )
        try:
            await asyncio.wait_for(producer.start(), self._timeout_s)
        except BaseException:
            await _close_quietly(producer)
            raise
        self._producer = producer
        self._connected = True

    async def send(
        self, topic: str, key: bytes, value: bytes, headers: Headers
    ) -> asyncio.Future[Delivered]:
        """Queue one record; the future resolves with its partition and offset."""
        if self._producer is None:
            raise ProduceError(Kind.RETRIABLE, "the producer is not started", "NOT_STARTED")
        try:
            sent = await self._producer.send(topic, value, key=key, headers=list(headers))
        except kafka_errors.KafkaError as exc:
            raise produce_error(exc) from exc
        future: asyncio.Future[Delivered] = asyncio.get_running_loop().create_future()
        sent.add_done_callback(functools.partial(_settle, future))
        return future

    def send_now(
        self, topic: str, key: bytes, value: bytes, headers: Headers
    ) -> asyncio.Future[Delivered] | None:
        """None: aiokafka queues a record only in a coroutine (:meth:`send`)."""
        return None

    async def stop(self, timeout_s: float) -> None:
        """Flush pending records for at most ``timeout_s``, then close (idempotent)."""
        producer, self._producer, self._connected = self._producer, None, False
        if producer is None:
            return
        try:
            await asyncio.wait_for(producer.flush(), timeout_s)
        except TimeoutError:
            log.error(
                "producer flush did not finish in time; unacknowledged records were never "
                "answered OK, so gateways will resend them",
                extra={"timeout_s": timeout_s},
            )
        await _close_quietly(producer)


_TOO_LARGE = (kafka_errors.MessageSizeTooLargeError, kafka_errors.RecordListTooLargeError)
_AUTH = (
    kafka_errors.TopicAuthorizationFailedError,
    kafka_errors.ClusterAuthorizationFailedError,
    kafka_errors.TransactionalIdAuthorizationFailed,
)


def produce_error(exc: BaseException) -> ProduceError:
    """Map an aiokafka exception to a neutral ProduceError."""
    name = type(exc).__name__
    if isinstance(exc, kafka_errors.KafkaTimeoutError):
        return ProduceError(Kind.TIMEOUT, str(exc), name)
    if isinstance(exc, _TOO_LARGE):
        return ProduceError(Kind.TOO_LARGE, str(exc), name)
    if isinstance(exc, _AUTH):
        return ProduceError(Kind.AUTH, str(exc), name)
    if isinstance(exc, kafka_errors.KafkaConnectionError | ConnectionError):
        return ProduceError(Kind.RETRIABLE, str(exc), name)
    if isinstance(exc, kafka_errors.KafkaError) and (exc.retriable or exc.invalid_metadata):
        return ProduceError(Kind.RETRIABLE, str(exc), name)
    return ProduceError(Kind.OTHER, str(exc), name)


def _settle(future: asyncio.Future[Delivered], sent: asyncio.Future[RecordMetadata]) -> None:
    """Copy aiokafka's outcome to the servicer's future, its error as a ProduceError."""
    if future.done():
        return
    if sent.cancelled():
        future.set_exception(ProduceError(Kind.RETRIABLE, "the record was cancelled", "Cancelled"))
    elif (exc := sent.exception()) is not None:
        future.set_exception(exc if isinstance(exc, ProduceError) else produce_error(exc))
    else:
        md = sent.result()
        future.set_result(Delivered(md.topic, md.partition, md.offset))


async def _close_quietly(producer: AIOKafkaProducer) -> None:
    try:
        await asyncio.wait_for(producer.stop(), 5.0)
    except Exception:
        log.warning("producer did not close cleanly", exc_info=True)
