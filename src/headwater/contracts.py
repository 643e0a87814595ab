"""Stable names for the messages on Headwater's topics, and the descriptor set.

Consumers import from here instead of the generated modules' paths::

    from headwater.contracts import Completion, Event, Outcome

Consumers in other languages decode every topic with the descriptor set
(``descriptor_set()``, shipped in the wheel as ``headwater/proto/headwater.binpb``, and
written by ``make descriptors`` to ``dist/headwater.binpb``): it holds every Headwater
message and their imports.
"""

from __future__ import annotations

from importlib import resources

from headwater.proto.device.v1.device_message_pb2 import DeviceMessage
from headwater.proto.events.v1.completion_pb2 import Completion, EventRef, Outcome, SourceRecord
from headwater.proto.events.v1.dead_letter_pb2 import DeadLetter
from headwater.proto.events.v1.device_state_pb2 import DeviceState
from headwater.proto.events.v1.event_pb2 import Alarm, Event, Measurement, Severity
from headwater.proto.master.v1.device_master_pb2 import DeviceMaster

__all__ = [
    "Alarm",
    "Completion",
    "DeadLetter",
    "DeviceMaster",
    "DeviceMessage",
    "DeviceState",
    "Event",
    "EventRef",
    "Measurement",
    "Outcome",
    "Severity",
    "SourceRecord",
    "descriptor_set",
]


def descriptor_set() -> bytes:
    """Return the serialized ``FileDescriptorSet`` of every Headwater message."""
    return resources.files("headwater.proto").joinpath("headwater.binpb").read_bytes()
