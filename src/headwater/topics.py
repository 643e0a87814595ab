"""Every Kafka topic Headwater uses, declared once.

The dev stack, the tests, ``headwater topics ensure`` and the Helm chart's topic hook all
read this table, so a topic is named and shaped in exactly one place.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from headwater.endpoints import ENDPOINTS

#: The device-data endpoints of the gRPC API and the ingest topic each one writes to
#: (the topics the enricher reads).
INGEST_TOPICS: dict[str, str] = {ep.name: ep.topic for ep in ENDPOINTS if ep.enriched}
#: Gateways' command status reports, as ingest writes them (DeviceMessage envelopes).
COMMAND_REPORTS_TOPIC = next(ep.topic for ep in ENDPOINTS if not ep.enriched)
#: Common-format events, one topic per event type.
EVENT_TOPICS: dict[str, str] = {
    "telemetry": "events.telemetry.v1",
    "alarm": "events.alarm.v1",
}
COMPLETIONS_TOPIC = "completions.v1"
DEADLETTER_TOPIC = "deadletter.v1"
RETRY_TOPIC = "retry.1.v1"
DEVICE_STATE_TOPIC = "state.devices.v1"
MASTER_DEVICES_TOPIC = "master.devices.v1"
#: Commands to devices (headwater.commands.v1.Command), key "<tenant>/<device_id>".
COMMANDS_TOPIC = "commands.v1"
#: Every state change of every command (CommandStatus), keyed as COMMANDS_TOPIC.
COMMAND_STATUS_TOPIC = "command-status.v1"
#: Each device's commands lease (which gateway owns its commands), keyed as COMMANDS_TOPIC;
#: compacted, read by every ingest replica (docs/commands.md#one-gateway-per-device).
COMMAND_OWNERS_TOPIC = "command-owners.v1"


def scoped_key(tenant: str, device_id: str) -> str:
    """Return the key of a compacted per-device record (master data, device state).

    Device ids are unique per tenant only, so a compacted topic keyed by the device id
    alone would let one tenant's record replace another's: "<tenant>/<device_id>".
    Device ids hold no "/". A record without a tenant is keyed by the device id.
    """
    return f"{tenant}/{device_id}" if tenant else device_id


def split_scoped_key(key: str) -> tuple[str, str]:
    """Return ``(tenant, device_id)`` of a key made by :func:`scoped_key`."""
    tenant, _, device_id = key.rpartition("/")
    return tenant, device_id


@dataclass(frozen=True)
class TopicSpec:
    """The desired shape of one topic."""

    name: str
    partitions: int = 6
    replication_factor: int = 3
    config: dict[str, str] = field(default_factory=dict)


_WEEK_MS = str(7 * 24 * 3600 * 1000)
_COMPACTED = {"cleanup.policy": "compact", "min.compaction.lag.ms": "60000"}


def all_topics(partitions: int = 6, replication_factor: int = 3) -> list[TopicSpec]:
    """Return the declarative description of every topic, for a given cluster size."""
    deleting = {"cleanup.policy": "delete", "retention.ms": _WEEK_MS}
    names = [
        *INGEST_TOPICS.values(),
        *EVENT_TOPICS.values(),
        COMPLETIONS_TOPIC,
        DEADLETTER_TOPIC,
        RETRY_TOPIC,
        COMMAND_REPORTS_TOPIC,
        COMMANDS_TOPIC,
        COMMAND_STATUS_TOPIC,
    ]
    specs = [TopicSpec(n, partitions, replication_factor, dict(deleting)) for n in names]
    specs += [
        TopicSpec(n, partitions, replication_factor, dict(_COMPACTED))
        for n in (DEVICE_STATE_TOPIC, MASTER_DEVICES_TOPIC, COMMAND_OWNERS_TOPIC)
    ]
    return specs
