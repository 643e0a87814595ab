"""The one place where errors become gRPC statuses and per-message results.

Produce errors (``produce_errors.ProduceError``, whatever client raised them) map to
IngestErrors by kind (retriable -> UNAVAILABLE, timeout -> DEADLINE_EXCEEDED, too large ->
INVALID_ARGUMENT, auth -> PERMISSION_DENIED, other -> INTERNAL);
IngestErrors map to ``google.rpc.Status`` with ErrorInfo, RetryInfo, BadRequest and
QuotaFailure details.
"""

from __future__ import annotations

import asyncio

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from headwater.ingest.errors import (
    BrokerAuthorizationError,
    BrokerTimeoutError,
    BrokerUnavailableError,
    IngestError,
    OverloadedError,
    RecordTooLargeError,
)
from headwater.ingest.writers.produce_errors import Kind, ProduceError
from headwater.proto.ingest.v1 import ingest_messages_pb2 as api

ERROR_DOMAIN = "ingest.headwater.dev"
#: How long a gateway should wait before retrying after a broker problem.
BROKER_RETRY_DELAY_S = 1.0


def from_produce_error(exc: BaseException) -> IngestError:
    """Translate an error raised while producing (a ProduceError, a timeout) into an IngestError."""
    if isinstance(exc, IngestError):
        return exc
    if isinstance(exc, asyncio.TimeoutError | TimeoutError):
        exc = ProduceError(Kind.TIMEOUT, "deadline reached", type(exc).__name__)
    if not isinstance(exc, ProduceError):
        name = type(exc).__name__
        return IngestError(f"unexpected error while producing: {name}: {exc}", kafka_error=name)
    name = exc.client_error
    if exc.kind is Kind.TIMEOUT:
        return BrokerTimeoutError(
            "no broker acknowledgement within the deadline; the message may or may not be "
            "stored, resend it with the same message_id",
            retry_delay_s=BROKER_RETRY_DELAY_S,
            kafka_error=name,
        )
    if exc.kind is Kind.TOO_LARGE:
        return RecordTooLargeError(
            f"the broker refused the record as too large ({name}); shrink the payload",
            kafka_error=name,
        )
    if exc.kind is Kind.AUTH:
        return BrokerAuthorizationError(
            f"the ingest service may not write this topic ({name}); an operator must grant "
            "it write access",
            kafka_error=name,
        )
    if exc.kind is Kind.RETRIABLE:
        return BrokerUnavailableError(
            f"Kafka is unavailable ({name}: {exc.message}); retry later",
            retry_delay_s=BROKER_RETRY_DELAY_S,
            kafka_error=name,
        )
    return IngestError(f"unexpected error while producing: {name}: {exc.message}", kafka_error=name)


def _duration(seconds: float) -> duration_pb2.Duration:
    d = duration_pb2.Duration()
    d.FromNanoseconds(int(seconds * 1e9))
    return d


def to_rpc_status(err: IngestError) -> grpc.Status:
    """Return the gRPC status (with google.rpc details) that answers a whole call."""
    details = []
    info = error_details_pb2.ErrorInfo(reason=err.reason, domain=ERROR_DOMAIN)
    if err.kafka_error:
        info.metadata["kafka_error"] = err.kafka_error
    details.append(info)
    if err.retriable and err.retry_delay_s is not None:
        details.append(error_details_pb2.RetryInfo(retry_delay=_duration(err.retry_delay_s)))
    if err.field_violations:
        details.append(
            error_details_pb2.BadRequest(
                field_violations=[
                    error_details_pb2.BadRequest.FieldViolation(field=f, description=d)
                    for f, d in err.field_violations
                ]
            )
        )
    if isinstance(err, OverloadedError):
        info.metadata["limit"] = err.limit
        info.metadata["subject"] = err.subject
        details.append(
            error_details_pb2.QuotaFailure(
                violations=[
                    error_details_pb2.QuotaFailure.Violation(
                        subject=err.subject,
                        description=err.message,
                        quota_id=err.limit,
                        quota_metric=err.setting,
                        quota_value=err.limit_value,
                    )
                ]
            )
        )
    packed = []
    for detail in details:
        any_detail = any_pb2.Any()
        any_detail.Pack(detail)
        packed.append(any_detail)
    code = getattr(code_pb2, err.code.name)
    return rpc_status.to_status(status_pb2.Status(code=code, message=err.message, details=packed))


def error_result(message_id: str, err: IngestError) -> api.MessageResult:
    """Return the per-message result for a message that was not written."""
    result = api.MessageResult(
        message_id=message_id,
        code=err.code.value[0],
        error=api.MessageError(
            reason=err.reason,
            message=err.message,
            retriable=err.retriable,
            kafka_error=err.kafka_error,
            field_violations=[
                api.FieldViolation(field=f, description=d) for f, d in err.field_violations
            ],
        ),
    )
    if err.retriable and err.retry_delay_s is not None:
        result.error.retry_delay.CopyFrom(_duration(err.retry_delay_s))
    return result
