"""Span and metric attributes by the OpenTelemetry semantic conventions (RPC and messaging).

Which conventions, against the installed ``opentelemetry-semantic-conventions`` 0.66b2:

- RPC: ``rpc.system=grpc``, ``rpc.service``, ``rpc.method`` (the short method name) and
  ``rpc.grpc.status_code`` (the integer code), as collectors' span metrics, service graphs
  and ``opentelemetry-instrumentation-grpc`` use them. The installed conventions have newer
  names beside them; those that do not clash are set too: ``rpc.system.name=grpc`` and
  ``rpc.response.status_code`` (the code's name). Their fully qualified ``rpc.method`` would
  clash with the short one and is left out. The duration histogram is the current
  ``rpc.server.call.duration`` in seconds (``rpc.server.duration`` in ms is deprecated).
- Messaging: ``messaging.system=kafka``, ``messaging.destination.name``,
  ``messaging.operation.type`` (send, receive, process) and ``messaging.operation.name``,
  and for a single record its ``messaging.kafka.message.key``,
  ``messaging.destination.partition.id`` and ``messaging.kafka.offset`` once known.
"""

from __future__ import annotations

from typing import Literal

import grpc

Operation = Literal["send", "receive", "process"]
Attributes = dict[str, str | int]


def status_number(code_name: str) -> int:
    """Return the integer of a gRPC status code name (``OK`` -> 0); 2 (UNKNOWN) if unknown."""
    try:
        return int(grpc.StatusCode[code_name].value[0])
    except KeyError:
        return int(grpc.StatusCode.UNKNOWN.value[0])


def rpc_attributes(service: str, method: str) -> Attributes:
    """Return a gRPC server span's attributes known when the call starts."""
    return {
        "rpc.system": "grpc",
        "rpc.system.name": "grpc",
        "rpc.service": service,
        "rpc.method": method,
    }


def rpc_status_attributes(code_name: str) -> Attributes:
    """Return the attributes of a call's final status (``code_name`` as ``OK``)."""
    return {"rpc.grpc.status_code": status_number(code_name), "rpc.response.status_code": code_name}


def rpc_metric_attributes(service: str, method: str, code_name: str) -> Attributes:
    """Return ``rpc.server.call.duration``'s attributes for one finished call."""
    return {**rpc_attributes(service, method), **rpc_status_attributes(code_name)}


def messaging_attributes(
    operation: Operation,
    topic: str,
    *,
    batch_size: int | None = None,
    key: bytes | str | None = None,
    partition: int | None = None,
    offset: int | None = None,
) -> Attributes:
    """Return a Kafka span's attributes; per-record ones only when there is one record."""
    attrs: Attributes = {
        "messaging.system": "kafka",
        "messaging.destination.name": topic,
        "messaging.operation.type": operation,
        "messaging.operation.name": operation,
    }
    if batch_size is not None and batch_size != 1:
        attrs["messaging.batch.message_count"] = batch_size
    if key is not None:
        attrs["messaging.kafka.message.key"] = (
            key.decode("utf-8", "replace") if isinstance(key, bytes) else key
        )
    attrs |= record_position_attributes(partition, offset)
    return attrs


def record_position_attributes(partition: int | None, offset: int | None) -> Attributes:
    """Return where one record was written or read, as far as it is known."""
    attrs: Attributes = {}
    if partition is not None:
        attrs["messaging.destination.partition.id"] = str(partition)
    if offset is not None:
        attrs["messaging.kafka.offset"] = offset
    return attrs
