"""How per-message results and failed calls are read (pure units: built results, no server)."""

from __future__ import annotations

import grpc
import pytest

from headwater.gateway.answers import judge, match
from headwater.proto.ingest.v1 import ingest_messages_pb2 as api


def result(code: grpc.StatusCode, reason: str = "", retriable: bool = False, delay_ms: int = 0):
    r = api.MessageResult(message_id="m", code=code.value[0])
    if code != grpc.StatusCode.OK:
        r.error.reason, r.error.message, r.error.retriable = reason, f"{reason} text", retriable
    if delay_ms:
        r.error.retry_delay.FromMilliseconds(delay_ms)
    return r


@pytest.mark.parametrize(
    ("code", "reason", "retriable", "status"),
    [
        (grpc.StatusCode.OK, "", False, "delivered"),
        (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_MESSAGE", False, "rejected"),
        (grpc.StatusCode.INVALID_ARGUMENT, "PAYLOAD_TOO_LARGE", False, "rejected"),
        (grpc.StatusCode.PERMISSION_DENIED, "DEVICE_NOT_PERMITTED", False, "rejected"),
        # The frame's fault, or the service's (its Kafka ACLs): the message is kept.
        (grpc.StatusCode.INVALID_ARGUMENT, "BATCH_SIZE_OUT_OF_RANGE", False, "retry"),
        (grpc.StatusCode.PERMISSION_DENIED, "BROKER_AUTHORIZATION_FAILED", False, "retry"),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, "OVERLOADED", True, "retry"),
        (grpc.StatusCode.UNAVAILABLE, "BROKER_UNAVAILABLE", True, "retry"),
        (grpc.StatusCode.DEADLINE_EXCEEDED, "BROKER_TIMEOUT", True, "retry"),
        (grpc.StatusCode.INTERNAL, "", False, "retry"),  # unknown trouble: never dropped
    ],
)
def test_each_result_is_delivered_kept_or_rejected(code, reason, retriable, status) -> None:
    verdict = judge(result(code, reason, retriable))
    assert (verdict.status, verdict.code, verdict.reason) == (status, code.name, reason)


def test_the_servers_retry_delay_is_read() -> None:
    verdict = judge(result(grpc.StatusCode.RESOURCE_EXHAUSTED, "OVERLOADED", True, 250))
    assert verdict.retry_delay_s == pytest.approx(0.25)
    assert judge(result(grpc.StatusCode.UNAVAILABLE, "X", True)).retry_delay_s == 0


def test_results_pair_by_position_even_without_an_id_and_by_id_otherwise() -> None:
    a, b = api.MessageResult(message_id="a"), api.MessageResult(message_id="")
    assert match(["a", "b"], [a, b]) == [a, b]  # b could not be parsed: only its place says
    c = api.MessageResult(message_id="c")
    assert match(["a", "b", "c"], [c, a]) == [a, None, c]  # a missing answer is kept
