"""Read command-status.v1 back: a command's states, and the commands of a device.

The topic is read from its start to its end; commands live as long as its retention
(7 days), so this is an operator's tool, not a service's lookup.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from headwater.commands import model
from headwater.kafka.settings import KafkaSettings
from headwater.proto.commands.v1.command_status_pb2 import CommandStatus
from headwater.topics import COMMAND_STATUS_TOPIC


@dataclass
class CommandHistory:
    """Every status record of one command, in log order, and the state they add up to."""

    command_id: str
    records: list[CommandStatus] = field(default_factory=list)

    @property
    def current(self) -> CommandStatus:
        """The record of the furthest state (see :func:`model.rank`); ties: the newest."""
        best = self.records[0]
        for record in self.records[1:]:
            if model.rank(record.state) >= model.rank(best.state):
                best = record
        return best

    @property
    def states(self) -> list[str]:
        """The states the command reached, each once, in the order of its life.

        Records are not in that order, nor once each: states arrive at least once and
        from several writers. Ingest writes DELIVERED at the gateway's acknowledgement,
        which can land before the sender's QUEUED, and the gateway reports DELIVERED
        again. Ordered by :func:`model.rank`; final states (one rank) as first seen.
        """
        first: dict[int, int] = {}
        for position, record in enumerate(self.records):
            first.setdefault(record.state, position)
        ordered = sorted(first, key=lambda state: (model.rank(state), first[state]))
        return [model.state_name(state) for state in ordered]


def read_histories(
    kafka: KafkaSettings, topic: str = COMMAND_STATUS_TOPIC, timeout_s: float = 60.0
) -> dict[str, CommandHistory]:
    """Return the history of every command in the topic, by command id."""
    from headwater.kafka.read import read_topic

    histories: dict[str, CommandHistory] = {}
    for msg in read_topic(kafka, topic, timeout_s, client_role="headwater-command-reader"):
        value = msg.value()
        if not value:
            continue
        status = CommandStatus.FromString(value)
        histories.setdefault(status.command_id, CommandHistory(status.command_id))
        histories[status.command_id].records.append(status)
    return histories


def as_row(history: CommandHistory) -> dict[str, object]:
    """One command as a flat row for tables and JSON."""
    current = history.current
    return {
        "command_id": history.command_id,
        "tenant": current.tenant,
        "device_id": current.device_id,
        "name": current.name,
        "state": model.state_name(current.state),
        "reason": current.reason,
        "time_ms": current.time.ToMilliseconds(),
        "first_ms": min(r.time.ToMilliseconds() for r in history.records),
        "gateway_id": current.gateway_id,
        "states": history.states,
    }
