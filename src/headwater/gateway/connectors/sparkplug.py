"""The Sparkplug B topic namespace, and the commands a gateway sends back (NCMD, DCMD).

``spBv1.0/<group>/<type>/<node>[/<device>]`` (Eclipse Sparkplug 3.0, chapter 4). Data and
lifecycle messages (NBIRTH, NDATA, NDEATH, DBIRTH, DDATA, DDEATH) pass to ingest untouched,
with the message type as a media type parameter (``; message-type=DDATA``), which is how
the enricher's Sparkplug normalizer learns it; N* messages belong to the node's device id,
D* messages to the device's. Everything else in the namespace (STATE, NCMD, DCMD) is not
device data.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from headwater.gateway.commands import RejectCommand
from headwater.gateway.connectors.mqtt_config import SparkplugConfig
from headwater.proto.commands.v1.command_pb2 import Command
from headwater.proto.sparkplug.v1 import sparkplug_b_pb2 as spb

NAMESPACE = "spBv1.0"
CONTENT_TYPE = "application/vnd.eclipse.sparkplug.b+protobuf"
NODE_TYPES = ("NBIRTH", "NDATA", "NDEATH")
DEVICE_TYPES = ("DBIRTH", "DDATA", "DDEATH")
#: The node control metric that asks an edge node to send its births again.
REBIRTH_METRIC = "Node Control/Rebirth"


@dataclass(frozen=True)
class SparkplugAddress:
    """Where a Sparkplug node or device lives in the namespace."""

    group: str
    node: str
    device: str | None

    def command_topic(self) -> str:
        """Return the NCMD topic of a node, or the DCMD topic of a device."""
        if self.device is None:
            return f"{NAMESPACE}/{self.group}/NCMD/{self.node}"
        return f"{NAMESPACE}/{self.group}/DCMD/{self.node}/{self.device}"


@dataclass(frozen=True)
class SparkplugMessage:
    """A device message's identity: who sent it and its media type."""

    address: SparkplugAddress
    message_type: str
    device_id: str
    content_type: str


def subscriptions(config: SparkplugConfig) -> list[str]:
    """Return the topic filters of the data and lifecycle messages of the configured groups."""
    filters = []
    for group in config.groups:
        filters += [f"{NAMESPACE}/{group}/{t}/+" for t in NODE_TYPES]
        filters += [f"{NAMESPACE}/{group}/{t}/+/+" for t in DEVICE_TYPES]
    return filters


def parse_topic(topic: str, config: SparkplugConfig) -> SparkplugMessage | None:
    """Return what a Sparkplug topic says, or None when it carries no device data."""
    levels = topic.split("/")
    if len(levels) not in (4, 5) or levels[0] != NAMESPACE:
        return None
    _, group, message_type, node, *rest = levels
    if message_type in NODE_TYPES and not rest:
        address = SparkplugAddress(group, node, None)
        device_id = config.node_device_id.format(group=group, node=node)
    elif message_type in DEVICE_TYPES and rest:
        address = SparkplugAddress(group, node, rest[0])
        device_id = config.device_id.format(group=group, node=node, device=rest[0])
    else:
        return None
    return SparkplugMessage(
        address, message_type, device_id, f"{CONTENT_TYPE}; message-type={message_type}"
    )


def command_payload(command: Command, address: SparkplugAddress) -> bytes:
    """Return the NCMD/DCMD payload of a command.

    ``rebirth`` (a node) sets Node Control/Rebirth; ``write`` takes a JSON object of metric
    names and values (``{"Process/Setpoint": 21.5}``) and writes them as typed metrics.

    Raises:
        RejectCommand: an unknown command name, or a payload that is not such an object.
    """
    now_ms = int(time.time() * 1000)
    payload = spb.Payload(timestamp=now_ms)
    if command.name == "rebirth":
        if address.device is not None:
            raise RejectCommand("NOT_A_NODE", "rebirth is a node command; send it to the node")
        _metric(payload, REBIRTH_METRIC, True, now_ms)
    elif command.name == "write":
        try:
            values = json.loads(command.payload or b"null")
        except ValueError as exc:
            raise RejectCommand("BAD_PAYLOAD", f"write needs a JSON object: {exc}") from None
        if not isinstance(values, dict) or not values:
            raise RejectCommand("BAD_PAYLOAD", 'write needs {"metric name": value, ...}')
        for name, value in values.items():
            _metric(payload, name, value, now_ms)
    else:
        raise RejectCommand(
            "UNKNOWN_COMMAND", f"Sparkplug devices take rebirth and write, not {command.name!r}"
        )
    return payload.SerializeToString()


def _metric(payload: spb.Payload, name: str, value: Any, now_ms: int) -> None:
    m = payload.metrics.add(name=name, timestamp=now_ms)
    if isinstance(value, bool):
        m.datatype, m.boolean_value = spb.DATA_TYPE_BOOLEAN, value
    elif isinstance(value, int):
        m.datatype, m.long_value = spb.DATA_TYPE_INT64, value & 0xFFFFFFFFFFFFFFFF
    elif isinstance(value, float):
        m.datatype, m.double_value = spb.DATA_TYPE_DOUBLE, value
    elif isinstance(value, str):
        m.datatype, m.string_value = spb.DATA_TYPE_STRING, value
    else:
        raise RejectCommand("BAD_PAYLOAD", f"metric {name!r}: {value!r} is no scalar")
