"""Relay gateways' command reports to command-status.v1.

Gateways report DELIVERED, EXECUTED, FAILED and REJECTED as ordinary device messages on
the command-status endpoint (so they are spooled and retried like telemetry); ingest
writes those to ingest.command-status.v1 keyed by device id. The relay reads them (one
consumer group over all replicas: each report relayed once, at least once), checks them
and writes the CommandStatus keyed ``<tenant>/<device_id>`` next to the QUEUED and
EXPIRED records of the same command, so one partition holds a command's whole life.

Checked: the payload is a CommandStatus; its device is the message's device (ingest
already refused a message for a device not bound to the gateway); the tenant and gateway
are taken from the record headers ingest wrote, never from the payload; the command is
one the book knows. Anything else is dropped with a warning and counted.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from google.protobuf.message import DecodeError

from headwater import record_headers as rh
from headwater.commands import model
from headwater.endpoints import COMMAND_STATUS_CONTENT_TYPE
from headwater.ingest.producer import RecordWriter
from headwater.kafka.settings import KafkaSettings
from headwater.proto.commands.v1.command_status_pb2 import CommandState, CommandStatus
from headwater.proto.device.v1.device_message_pb2 import DeviceMessage

from .book import CommandBook
from .feed import CLIENT_ROLE, _poll, close_soon

log = logging.getLogger(__name__)
#: States a gateway may report; QUEUED is the sender's to write.
_GATEWAY_STATES = frozenset(
    {
        CommandState.COMMAND_STATE_DELIVERED,
        CommandState.COMMAND_STATE_EXECUTED,
        CommandState.COMMAND_STATE_FAILED,
        CommandState.COMMAND_STATE_REJECTED,
        # A command delivered just before its expiry may expire in the gateway's spool
        # before it runs; the gateway then reports it EXPIRED instead of running it.
        CommandState.COMMAND_STATE_EXPIRED,
    }
)


class StatusRelay:
    """Reads the reports topic and writes checked statuses (see the module docstring)."""

    def __init__(
        self,
        kafka: KafkaSettings,
        writer: RecordWriter,
        book: CommandBook,
        caught_up: asyncio.Event,
        reports_topic: str,
        status_topic: str,
        group: str,
        on_relayed: Any = None,
    ) -> None:
        self._kafka = kafka
        self._writer = writer
        self._book = book
        self._caught_up = caught_up
        self._reports_topic = reports_topic
        self._status_topic = status_topic
        self._group = group
        #: Called with (status or None when dropped, reason).
        self._on_relayed = on_relayed or (lambda _status, _reason: None)

    async def run(self) -> None:
        """Relay until cancelled; offsets are committed after the statuses are acked."""
        from confluent_kafka import Consumer

        consumer = Consumer(
            self._kafka.consumer_config(CLIENT_ROLE, self._group)
            | {"auto.offset.reset": "earliest"}
        )
        consumer.subscribe([self._reports_topic])
        try:
            # Reports are checked against the book; before it is caught up, a report for
            # a command it has not read yet would look unknown.
            await self._caught_up.wait()
            while True:
                batch = await asyncio.to_thread(_poll, consumer)
                if not batch:
                    continue
                futures = []
                for msg in batch:
                    status = self._check(msg)
                    if status is not None:
                        futures.append(
                            await self._writer.send(
                                self._status_topic,
                                model.command_key(status),
                                status.SerializeToString(),
                                [],
                            )
                        )
                if futures:
                    # Not committed unless all are acked: the batch is read again.
                    await asyncio.gather(*futures)
                # Asynchronous: a commit lost to a crash means the batch is relayed again
                # (at least once, readers fold repeats); waiting for each would cap the rate.
                consumer.commit(asynchronous=True)
        finally:
            await close_soon(consumer)

    def _check(self, msg: Any) -> CommandStatus | None:
        headers = {k: v for k, v in (msg.headers() or []) if v is not None}
        try:
            envelope = DeviceMessage.FromString(msg.value() or b"")
            status = CommandStatus.FromString(envelope.payload)
        except DecodeError:
            return self._drop(None, "NOT_A_COMMAND_STATUS")
        if envelope.content_type != COMMAND_STATUS_CONTENT_TYPE:
            return self._drop(status, "WRONG_CONTENT_TYPE")
        if status.device_id != envelope.device_id:
            return self._drop(status, "DEVICE_MISMATCH")
        if status.state not in _GATEWAY_STATES:
            return self._drop(status, "STATE_NOT_REPORTABLE")
        status.tenant = headers.get(rh.TENANT, b"").decode()
        status.gateway_id = headers.get(rh.GATEWAY_ID, b"").decode()
        key = (status.tenant, status.device_id, status.command_id)
        if not self._book.known(key):
            return self._drop(status, "UNKNOWN_COMMAND")
        self._book.apply(status)
        self._on_relayed(status, "")
        return status

    def _drop(self, status: CommandStatus | None, reason: str) -> CommandStatus | None:
        log.warning(
            "dropping a command report",
            extra={
                "reason": reason,
                "command_id": status.command_id if status else "",
                "device_id": status.device_id if status else "",
            },
        )
        self._on_relayed(None, reason)
        return None
