"""The errors of the ingest service: one root, each carrying what a caller needs to act.

``status.py`` turns them into gRPC statuses and per-message results, in one place.
"""

from __future__ import annotations

from collections.abc import Sequence

import grpc


class IngestError(Exception):
    """Root of every error the ingest service answers with."""

    code: grpc.StatusCode = grpc.StatusCode.INTERNAL
    reason: str = "INTERNAL"
    #: Sending the same message again later may succeed.
    retriable: bool = False
    #: Errors of the infrastructure (broker, overload, shutdown), not of one message.
    infrastructure: bool = False

    def __init__(
        self,
        message: str,
        *,
        reason: str | None = None,
        retry_delay_s: float | None = None,
        field_violations: Sequence[tuple[str, str]] = (),
        kafka_error: str = "",
    ) -> None:
        super().__init__(message)
        self.message = message
        if reason:
            self.reason = reason
        self.retry_delay_s = retry_delay_s
        self.field_violations = tuple(field_violations)
        self.kafka_error = kafka_error


class InvalidMessageError(IngestError):
    """A message (or the request around it) breaks the contract; fix it, do not retry."""

    code = grpc.StatusCode.INVALID_ARGUMENT
    reason = "INVALID_MESSAGE"


class UnauthenticatedError(IngestError):
    """No, an unknown or a revoked credential."""

    code = grpc.StatusCode.UNAUTHENTICATED
    reason = "UNAUTHENTICATED"


class PermissionDeniedError(IngestError):
    """The gateway is known but may not speak for this device (or topic)."""

    code = grpc.StatusCode.PERMISSION_DENIED
    reason = "DEVICE_NOT_PERMITTED"


class OverloadedError(IngestError):
    """The process is at its in-flight limit; retry after the delay."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED
    reason = "OVERLOADED"
    retriable = True
    infrastructure = True


class BrokerUnavailableError(IngestError):
    """Kafka did not take the message for a passing reason; retry after the delay."""

    code = grpc.StatusCode.UNAVAILABLE
    reason = "BROKER_UNAVAILABLE"
    retriable = True
    infrastructure = True


class BrokerTimeoutError(IngestError):
    """No broker ack arrived within the deadline; the message may or may not be stored.

    Resending with the same message_id is safe: the enricher drops duplicates.
    """

    code = grpc.StatusCode.DEADLINE_EXCEEDED
    reason = "BROKER_TIMEOUT"
    retriable = True
    infrastructure = True


class RecordTooLargeError(IngestError):
    """The broker refused the record as too large for the topic."""

    code = grpc.StatusCode.INVALID_ARGUMENT
    reason = "RECORD_TOO_LARGE"


class BrokerAuthorizationError(IngestError):
    """The ingest service itself is not allowed to write the topic: an operator must act."""

    code = grpc.StatusCode.PERMISSION_DENIED
    reason = "BROKER_AUTHORIZATION_FAILED"
    infrastructure = True


class ShuttingDownError(IngestError):
    """The process is draining; retry on another replica."""

    code = grpc.StatusCode.UNAVAILABLE
    reason = "SHUTTING_DOWN"
    retriable = True
    infrastructure = True
