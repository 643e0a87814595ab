"""Writers raise neutral produce errors; status.py maps only those (issue 25)."""

from __future__ import annotations

import ast
from pathlib import Path

import grpc
import pytest
from aiokafka import errors as kafka_errors
from confluent_kafka import KafkaError
from google.rpc import error_details_pb2, status_pb2

from headwater.ingest import status
from headwater.ingest.errors import BrokerTimeoutError
from headwater.ingest.writers.aiokafka_writer import produce_error as from_aiokafka
from headwater.ingest.writers.confluent_writer import produce_error as from_librdkafka
from headwater.ingest.writers.produce_errors import Kind, ProduceError

SERVICE = Path(__file__).resolve().parents[2] / "services" / "ingest"


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        (KafkaError._MSG_TIMED_OUT, Kind.TIMEOUT),
        (KafkaError._TIMED_OUT, Kind.TIMEOUT),
        (KafkaError.REQUEST_TIMED_OUT, Kind.RETRIABLE),
        (KafkaError.NOT_LEADER_FOR_PARTITION, Kind.RETRIABLE),
        (KafkaError._TRANSPORT, Kind.RETRIABLE),
        (KafkaError._ALL_BROKERS_DOWN, Kind.RETRIABLE),
        (KafkaError._QUEUE_FULL, Kind.RETRIABLE),
        (KafkaError._FATAL, Kind.RETRIABLE),
        (KafkaError._PURGE_QUEUE, Kind.RETRIABLE),
        (KafkaError.MSG_SIZE_TOO_LARGE, Kind.TOO_LARGE),
        (KafkaError.TOPIC_AUTHORIZATION_FAILED, Kind.AUTH),
        (KafkaError.CLUSTER_AUTHORIZATION_FAILED, Kind.AUTH),
        (KafkaError.INVALID_RECORD, Kind.OTHER),
    ],
)
def test_librdkafka_errors_become_neutral_kinds(code, kind):
    err = from_librdkafka(KafkaError(code))
    assert err.kind is kind
    assert err.client_error == KafkaError(code).name()


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (kafka_errors.KafkaTimeoutError(), Kind.TIMEOUT),
        (kafka_errors.RequestTimedOutError(), Kind.RETRIABLE),
        (kafka_errors.NotLeaderForPartitionError(), Kind.RETRIABLE),
        (kafka_errors.KafkaConnectionError(), Kind.RETRIABLE),
        (kafka_errors.MessageSizeTooLargeError(), Kind.TOO_LARGE),
        (kafka_errors.TopicAuthorizationFailedError(), Kind.AUTH),
        (kafka_errors.UnknownError(), Kind.OTHER),
    ],
)
def test_aiokafka_errors_become_neutral_kinds(exc, kind):
    err = from_aiokafka(exc)
    assert err.kind is kind
    assert err.client_error == type(exc).__name__


@pytest.mark.parametrize(
    ("kind", "code", "retriable", "reason"),
    [
        (Kind.RETRIABLE, grpc.StatusCode.UNAVAILABLE, True, "BROKER_UNAVAILABLE"),
        (Kind.TIMEOUT, grpc.StatusCode.DEADLINE_EXCEEDED, True, "BROKER_TIMEOUT"),
        (Kind.TOO_LARGE, grpc.StatusCode.INVALID_ARGUMENT, False, "RECORD_TOO_LARGE"),
        (Kind.AUTH, grpc.StatusCode.PERMISSION_DENIED, False, None),
        (Kind.OTHER, grpc.StatusCode.INTERNAL, False, "INTERNAL"),
    ],
)
def test_each_kind_maps_to_one_grpc_code(kind, code, retriable, reason):
    err = status.from_produce_error(ProduceError(kind, "what the client said", "CLIENT_NAME"))
    assert (err.code, err.retriable) == (code, retriable)
    if reason:
        assert err.reason == reason
    assert err.kafka_error == "CLIENT_NAME"
    rpc = status.to_rpc_status(err)
    assert rpc.code == code
    st = status_pb2.Status.FromString(dict(rpc.trailing_metadata)["grpc-status-details-bin"])
    info = error_details_pb2.ErrorInfo()
    st.details[0].Unpack(info)
    assert info.metadata["kafka_error"] == "CLIENT_NAME"
    result = status.error_result("m1", err)
    assert (result.code, result.error.retriable) == (code.value[0], retriable)


def test_a_deadline_is_a_timeout_and_anything_else_internal():
    assert isinstance(status.from_produce_error(TimeoutError()), BrokerTimeoutError)
    err = status.from_produce_error(RuntimeError("boom"))
    assert err.code == grpc.StatusCode.INTERNAL


@pytest.mark.parametrize(
    "module",
    # The one mapping to gRPC, the writer protocol, and everything that writes through it.
    [
        "status.py",
        "writers/protocol.py",
        "write/frames.py",
        "write/messages.py",
        "rpc/servicer.py",
        "rpc/calls.py",
        "rpc/publish.py",
        "rpc/streams.py",
    ],
)
def test_only_the_writers_know_a_kafka_client(module):
    tree = ast.parse((SERVICE / module).read_text())
    imported = {
        (node.module or "") if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    assert not any(m.startswith(("aiokafka", "confluent_kafka")) for m in imported)
