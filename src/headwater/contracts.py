"""Stable names for the messages on Headwater's topics, and the descriptor set.

Consumers import from here instead of the generated modules' paths::

    from headwater.contracts import Completion, Event, Outcome, Command, CommandStatus

Consumers in other languages decode every topic with the descriptor set
(``descriptor_set()``, shipped in the wheel as ``headwater/proto/headwater.binpb``, and
written by ``make descriptors`` to ``dist/headwater.binpb``): it holds every Headwater
message and their imports. ``TOPIC_MESSAGES`` says which message each topic carries.
"""

from __future__ import annotations

from importlib import resources

from headwater.proto.commands.v1.command_lease_pb2 import CommandLease
from headwater.proto.commands.v1.command_pb2 import Command
from headwater.proto.commands.v1.command_status_pb2 import CommandState, CommandStatus
from headwater.proto.device.v1.device_message_pb2 import DeviceMessage
from headwater.proto.events.v1.completion_pb2 import Completion, EventRef, Outcome, SourceRecord
from headwater.proto.events.v1.dead_letter_pb2 import DeadLetter, Header, Redrive
from headwater.proto.events.v1.device_state_pb2 import DeviceState
from headwater.proto.events.v1.event_pb2 import Alarm, Event, Measurement, Severity
from headwater.proto.events.v1.parked_message_pb2 import ParkedMessage
from headwater.proto.master.v1.device_master_pb2 import DeviceMaster
from headwater.topics import (
    COMMAND_OWNERS_TOPIC,
    COMMAND_REPORTS_TOPIC,
    COMMAND_STATUS_TOPIC,
    COMMANDS_TOPIC,
    COMPLETIONS_TOPIC,
    DEADLETTER_TOPIC,
    DEVICE_STATE_TOPIC,
    EVENT_TOPICS,
    INGEST_TOPICS,
    MASTER_DEVICES_TOPIC,
    RETRY_TOPIC,
)

__all__ = [
    "TOPIC_MESSAGES",
    "Alarm",
    "Command",
    "CommandState",
    "CommandStatus",
    "Completion",
    "DeadLetter",
    "DeviceMaster",
    "DeviceMessage",
    "DeviceState",
    "Event",
    "EventRef",
    "Header",
    "Measurement",
    "Outcome",
    "ParkedMessage",
    "Redrive",
    "Severity",
    "SourceRecord",
    "descriptor_set",
]

#: The full Protobuf name of the message in every topic's record values.
TOPIC_MESSAGES: dict[str, str] = {
    **dict.fromkeys(INGEST_TOPICS.values(), DeviceMessage.DESCRIPTOR.full_name),
    **dict.fromkeys(EVENT_TOPICS.values(), Event.DESCRIPTOR.full_name),
    COMPLETIONS_TOPIC: Completion.DESCRIPTOR.full_name,
    DEADLETTER_TOPIC: DeadLetter.DESCRIPTOR.full_name,
    RETRY_TOPIC: ParkedMessage.DESCRIPTOR.full_name,
    DEVICE_STATE_TOPIC: DeviceState.DESCRIPTOR.full_name,
    MASTER_DEVICES_TOPIC: DeviceMaster.DESCRIPTOR.full_name,
    # Gateways' reports as ingest writes them; each payload is a CommandStatus.
    COMMAND_REPORTS_TOPIC: DeviceMessage.DESCRIPTOR.full_name,
    COMMANDS_TOPIC: Command.DESCRIPTOR.full_name,
    COMMAND_STATUS_TOPIC: CommandStatus.DESCRIPTOR.full_name,
    # Internal to ingest (which gateway owns a device's commands); described all the same.
    COMMAND_OWNERS_TOPIC: CommandLease.DESCRIPTOR.full_name,
}


def descriptor_set() -> bytes:
    """Return the serialized ``FileDescriptorSet`` of every Headwater message."""
    return resources.files("headwater.proto").joinpath("headwater.binpb").read_bytes()
