"""Kafka connection failures explained by the setting to fix.

librdkafka reports a refused login or an untrusted broker certificate only to its error
callback, and the call that failed says "transport failure" or times out. Here those errors
are kept and turned into one message that names the ``HEADWATER_KAFKA_*`` variable.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from headwater.kafka.settings import ENV_CA, ENV_CERT, ENV_PASSWORD, KafkaSettings
from headwater.runtime.env import SettingError

log = logging.getLogger("headwater.kafka")


class KafkaSetupError(SettingError):
    """Kafka refused the connection because of a setting; the message names it."""


def explain(text: str, code: int | None = None) -> str | None:
    """Return a message naming the setting behind a connection error, or None.

    Args:
        text: The client's error text (librdkafka, aiokafka or the Java client).
        code: librdkafka's error code, when there is one.
    """
    lowered = text.lower()
    if code == KafkaError._AUTHENTICATION or "authentication failed" in lowered:
        return (
            f"Kafka refused the SASL login: check HEADWATER_KAFKA_SASL_USERNAME and "
            f"{ENV_PASSWORD} (and HEADWATER_KAFKA_SASL_MECHANISM) [{text}]"
        )
    if "certificate verify failed" in lowered or "pkix path" in lowered:
        return f"the broker's TLS certificate is not trusted: check {ENV_CA} [{text}]"
    if any(alert in lowered for alert in ("bad certificate", "certificate required", "unknown ca")):
        # The broker's TLS alert: it wants a client certificate it can verify (mTLS).
        return (
            f"the broker refused the client certificate: check {ENV_CERT} and "
            f"HEADWATER_KAFKA_SSL_KEY_LOCATION (a certificate the cluster's clients CA "
            f"signed, e.g. the Strimzi KafkaUser's) [{text}]"
        )
    if code == KafkaError._SSL or ("ssl" in lowered and "handshake" in lowered):
        return (
            f"the TLS handshake with Kafka failed: check {ENV_CA}, and for mTLS {ENV_CERT} "
            f"and HEADWATER_KAFKA_SSL_KEY_LOCATION [{text}]"
        )
    return None


class ErrorRecorder:
    """A librdkafka ``error_cb`` that keeps the first error explained by a setting."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.explained: str | None = None

    def __call__(self, err: KafkaError) -> None:
        """Record ``err`` (called by librdkafka from ``poll``/``flush``)."""
        message = explain(err.str(), err.code())
        with self._lock:
            if message and self.explained is None:
                self.explained = message
        log.warning("kafka client error", extra={"code": err.name(), "error": err.str()})

    def config(self) -> dict[str, Any]:
        """The configuration entries that route a client's errors and logs here."""
        return {"error_cb": self, "logger": log}


def connected_admin(
    kafka: KafkaSettings, client_role: str, timeout_s: float = 15.0, require: bool = True
) -> AdminClient:
    """Return an AdminClient that has fetched metadata, or raise naming the setting to fix.

    Args:
        kafka: The connection settings.
        client_role: The role part of its ``client.id``.
        timeout_s: How long to wait for the cluster.
        require: False: a cluster that does not answer (for no setting's fault) is left to
            the caller's next request, which fails as it would have without this check.

    Raises:
        KafkaSetupError: the login or TLS failed (the message names the variable).
        KafkaException: the cluster did not answer for another reason (``require`` only).
    """
    recorder = ErrorRecorder()
    admin = AdminClient(kafka.admin_config(client_role) | recorder.config())
    deadline = time.monotonic() + timeout_s
    while True:
        # Short tries: a refused login is final, so say so at once instead of after the
        # whole timeout; a broker that is merely slow still gets all of it.
        wait = max(0.1, min(1.0, deadline - time.monotonic()))
        try:
            admin.list_topics(timeout=wait)
            return admin
        except KafkaException:
            admin.poll(0)  # serve the queued error callbacks: they hold the reason
            if recorder.explained:
                raise KafkaSetupError(recorder.explained) from None
            if time.monotonic() >= deadline:
                if not require:
                    return admin
                raise
