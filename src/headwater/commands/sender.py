"""Send a command: check it, write it to commands.v1, then write its QUEUED status.

A command id sent twice is one command: ingest delivers a command id once per device
(the first record wins, docs/commands.md), and the gateway runs an id once. The second
send is not an error (a retried send after a timeout must be safe); it writes a second
record and a second QUEUED, which readers of command-status.v1 fold by command id.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from headwater.commands.checks import check_command
from headwater.commands.errors import CommandRefusedError
from headwater.commands.model import DEFAULT_TTL_S, command_key, now_ms, status_of
from headwater.ids import uuid7
from headwater.kafka.settings import KafkaSettings, resolve_kafka
from headwater.proto.commands.v1.command_pb2 import Command
from headwater.proto.commands.v1.command_status_pb2 import CommandState
from headwater.topics import COMMAND_STATUS_TOPIC, COMMANDS_TOPIC, MASTER_DEVICES_TOPIC

#: ``client.id`` role of the sender's producer.
CLIENT_ROLE = "headwater-commands"
#: How often an unknown device makes the master data be read again, at most.
_MASTER_REREAD_S = 5.0


@dataclass(frozen=True)
class SentCommand:
    """A command as written, and where."""

    command: Command
    partition: int
    offset: int


class KnownDevices:
    """The devices of master.devices.v1 ("known" means: it has a master record).

    Read once, and again when asked about a device it does not know (at most every few
    seconds), so a device added a moment ago is found without a restart.
    """

    def __init__(self, read: Callable[[], Mapping[str, Any]]) -> None:
        self._read = read
        self._devices: set[tuple[str, str]] = set()
        self._read_at = float("-inf")

    @classmethod
    def from_topic(cls, kafka: KafkaSettings, topic: str = MASTER_DEVICES_TOPIC) -> KnownDevices:
        """Known devices from the master-data topic."""
        from headwater.master.store import read_current

        return cls(lambda: read_current(kafka, topic))

    def _reload(self) -> None:
        devices = set()
        for key, record in self._read().items():
            tenant, _, device_id = key.rpartition("/")
            devices.add((record.tenant or tenant, record.device_id or device_id))
        self._devices = devices
        self._read_at = time.monotonic()

    def check(self, tenant: str, device_id: str) -> None:
        """Raise CommandRefusedError (UNKNOWN_TENANT, UNKNOWN_DEVICE) unless it is known."""
        if (tenant, device_id) in self._devices:
            return
        if time.monotonic() - self._read_at >= _MASTER_REREAD_S:
            self._reload()
        if (tenant, device_id) in self._devices:
            return
        if not any(t == tenant for t, _ in self._devices):
            raise CommandRefusedError(
                "UNKNOWN_TENANT",
                f"tenant {tenant!r} has no devices in {MASTER_DEVICES_TOPIC}; check the "
                "spelling, or load its devices with `headwater master load`",
            )
        raise CommandRefusedError(
            "UNKNOWN_DEVICE",
            f"device {device_id!r} of tenant {tenant!r} is not in {MASTER_DEVICES_TOPIC}; "
            "check the id, or add it with `headwater master put`",
        )


class CommandSender:
    """Writes commands for the tenants it is allowed to command.

    ``tenants`` is the authorization: the tenants this service may send commands to
    (``"*"`` in it: any). Sending is blocking (a produce and a flush per record); call it
    from a thread in async code.
    """

    def __init__(
        self,
        kafka: KafkaSettings | str,
        tenants: Collection[str],
        devices: KnownDevices | None = None,
        topic_prefix: str = "",
        timeout_s: float = 15.0,
    ) -> None:
        from confluent_kafka import Producer

        self._kafka = resolve_kafka(kafka)
        self._tenants = frozenset(tenants)
        prefix = topic_prefix
        self._devices = devices or KnownDevices.from_topic(
            self._kafka, prefix + MASTER_DEVICES_TOPIC
        )
        self._commands_topic = prefix + COMMANDS_TOPIC
        self._status_topic = prefix + COMMAND_STATUS_TOPIC
        self._timeout_s = timeout_s
        self._producer = Producer(self._kafka.producer_config(CLIENT_ROLE))

    def send(
        self,
        tenant: str,
        device_id: str,
        name: str,
        payload: bytes = b"",
        media_type: str = "application/json",
        ttl_s: float | None = None,
        expires_at_ms: int | None = None,
        command_id: str | None = None,
        correlation_data: bytes = b"",
    ) -> SentCommand:
        """Check and write one command, then its QUEUED status; return where it went.

        ``expires_at_ms`` wins over ``ttl_s``; neither: :data:`DEFAULT_TTL_S`.

        Raises:
            CommandRefusedError: nothing was written; ``reason`` says why.
            RuntimeError: the broker did not take the command (it may be retried with the
                same ``command_id``).
        """
        now = now_ms()
        if tenant not in self._tenants and "*" not in self._tenants:
            raise CommandRefusedError(
                "TENANT_NOT_PERMITTED",
                f"this sender may command tenants {sorted(self._tenants)}, not {tenant!r}",
            )
        if expires_at_ms is None:
            ttl = DEFAULT_TTL_S if ttl_s is None else ttl_s
            expires_at_ms = now + int(ttl * 1000)
        if expires_at_ms <= now:
            raise CommandRefusedError(
                "ALREADY_EXPIRED",
                f"the command would expire {(now - expires_at_ms) / 1000:.3f} s in the past; "
                "give a positive --ttl (seconds) or a future expiry",
            )
        command = Command(
            command_id=command_id or uuid7(now),
            tenant=tenant,
            device_id=device_id,
            name=name,
            payload=payload,
            media_type=media_type,
            correlation_data=correlation_data,
        )
        command.created_time.FromMilliseconds(now)
        command.expires_time.FromMilliseconds(expires_at_ms)
        check_command(command)
        self._devices.check(tenant, device_id)
        partition, offset = self._write(self._commands_topic, command)
        queued = status_of(command, CommandState.COMMAND_STATE_QUEUED, at_ms=now)
        self._write(self._status_topic, queued)
        return SentCommand(command, partition, offset)

    def _write(self, topic: str, record: Any) -> tuple[int, int]:
        """Produce one record keyed ``<tenant>/<device_id>`` and wait for the broker."""
        outcome: list[Any] = []
        self._producer.produce(
            topic,
            record.SerializeToString(),
            command_key(record),
            on_delivery=lambda err, msg: outcome.append((err, msg)),
        )
        self._producer.flush(self._timeout_s)
        if not outcome or outcome[0][0] is not None:
            err = outcome[0][0] if outcome else "no acknowledgement in time"
            raise RuntimeError(
                f"{topic}: the broker did not take the record ({err}); send again with "
                f"command id {record.command_id!r}"
            )
        msg = outcome[0][1]
        return msg.partition(), msg.offset()

    def close(self) -> None:
        """Flush what is left."""
        self._producer.flush(self._timeout_s)

    def __enter__(self) -> CommandSender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
