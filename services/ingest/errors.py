"""The errors of the ingest service: one root, each carrying what a caller needs to act.

:class:`IngestError` is a :class:`~headwater.errors.HeadwaterError`; ``retriable`` is True
exactly for the errors answered UNAVAILABLE, DEADLINE_EXCEEDED or RESOURCE_EXHAUSTED (the
codes a gateway retries on). ``status.py`` turns them into gRPC statuses and per-message
results, in one place.
"""

from __future__ import annotations

from collections.abc import Sequence

import grpc

from headwater.errors import HeadwaterError


class IngestError(HeadwaterError):
    """Root of every error the ingest service answers with."""

    code: grpc.StatusCode = grpc.StatusCode.INTERNAL
    reason: str = "INTERNAL"
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
    """A call was refused unstarted because a limit is reached; retry after the delay.

    Every limit answers with the same reason, OVERLOADED: gateways pause on it and read
    any other RESOURCE_EXHAUSTED as "request too large" (they shrink their frames), so
    the reason must not vary. Which limit refused, and for whom, travels in the
    QuotaFailure detail and the ErrorInfo metadata.
    """

    code = grpc.StatusCode.RESOURCE_EXHAUSTED
    reason = "OVERLOADED"
    retriable = True
    infrastructure = True

    def __init__(
        self,
        message: str,
        *,
        retry_delay_s: float,
        limit: str,
        setting: str,
        limit_value: int = 0,
        subject: str = "ingest-process",
    ) -> None:
        super().__init__(message, retry_delay_s=retry_delay_s)
        #: The limit's id (a QuotaFailure quota_id), e.g. "gateway_rate_bytes_per_second".
        self.limit = limit
        #: The setting (or tokens-file key) an operator changes to move the limit.
        self.setting = setting
        self.limit_value = limit_value
        #: Whose limit: "ingest-process" or "gateway:<id>".
        self.subject = subject


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
