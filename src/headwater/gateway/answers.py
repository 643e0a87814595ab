"""Reading the ingest service's answers: per-message results and failed calls.

The one place that decides what a code means for a spooled message: delivered (delete),
retry (keep, with a delay), or rejected for good (move to the rejected table).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from headwater.gateway.errors import CallFailedError
from headwater.proto.ingest.v1 import ingest_messages_pb2 as api

Status = Literal["delivered", "retry", "rejected"]

#: Per-message codes that will never succeed on a resend of the same bytes.
PERMANENT_CODES = frozenset(
    c.value[0]
    for c in (
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.OUT_OF_RANGE,
    )
)
#: Reasons that blame the request's framing or the service (its Kafka ACLs), not the
#: message: an operator or a smaller frame fixes them, so the message is kept and retried.
NOT_THE_MESSAGE = frozenset(
    {"BATCH_SIZE_OUT_OF_RANGE", "MALFORMED_REQUEST", "BROKER_AUTHORIZATION_FAILED"}
)
#: The server's reason for pushback: its in-flight budget is used up.
OVERLOADED = "OVERLOADED"
CODE_NAMES = {c.value[0]: c.name for c in grpc.StatusCode}


@dataclass(frozen=True)
class DeliveryReport:
    """What happened to one message on one attempt (for callers that keep their own books)."""

    message_id: str
    endpoint: str
    #: "delivered", "rejected" (for good), "retry" (kept for another attempt).
    status: Status
    code: str
    reason: str = ""
    partition: int = -1
    offset: int = -1


@dataclass(frozen=True)
class Verdict:
    """How to treat one message after one answer."""

    status: Status
    code: str
    reason: str = ""
    detail: str = ""
    #: The server's RetryInfo delay (0: none sent).
    retry_delay_s: float = 0.0


def judge(result: api.MessageResult) -> Verdict:
    """Turn one per-message result into what to do with the spooled message."""
    code = CODE_NAMES.get(result.code, str(result.code))
    if result.code == 0:
        return Verdict("delivered", code)
    err = result.error
    delay = err.retry_delay.ToTimedelta().total_seconds() if err.HasField("retry_delay") else 0.0
    permanent = result.code in PERMANENT_CODES and not err.retriable
    if permanent and err.reason not in NOT_THE_MESSAGE:
        return Verdict("rejected", code, err.reason, err.message)
    return Verdict("retry", code, err.reason, err.message, delay)


def match(rows_ids: list[str], results: list[api.MessageResult]) -> list[api.MessageResult | None]:
    """Pair each sent message with its result.

    The server answers in request order, one result per message; a message it could not
    even parse is answered with an empty id, which only the position identifies. Any other
    shape is matched by id, and a message without a result is kept for a retry.
    """
    if len(results) == len(rows_ids) and all(
        r.message_id in (i, "") for i, r in zip(rows_ids, results, strict=True)
    ):
        return list(results)
    by_id = {r.message_id: r for r in results if r.message_id}
    return [by_id.get(i) for i in rows_ids]


def call_failed(exc: grpc.aio.AioRpcError) -> CallFailedError:
    """Read the code, the ErrorInfo reason and the RetryInfo delay of a failed call."""
    reason, delay = exc.details() or "", 0.0
    status = rpc_status.from_call(exc)
    for detail in status.details if status is not None else []:
        info, retry = error_details_pb2.ErrorInfo(), error_details_pb2.RetryInfo()
        if detail.Unpack(info):
            reason = info.reason
        elif detail.Unpack(retry):
            delay = retry.retry_delay.ToTimedelta().total_seconds()
    return CallFailedError(exc.code(), reason, delay)
