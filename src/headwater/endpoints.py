"""The ingest API's endpoints: one row per endpoint, its RPCs, response types and ingest topic.

Ingest serves these RPCs and writes each endpoint to its own topic; the gateway library
spools and sends by endpoint name; ``topics`` creates the topics. All of them read this
table, so adding an endpoint is one row here (and its RPCs in ``proto/``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from headwater.proto.ingest.v1 import command_messages_pb2 as commands_api
from headwater.proto.ingest.v1 import ingest_messages_pb2 as api

#: The gRPC service every endpoint belongs to.
SERVICE_NAME = "headwater.ingest.v1.IngestService"


@dataclass(frozen=True)
class Endpoint:
    """One API endpoint: its name, ingest topic, RPC names and response types."""

    name: str
    topic: str
    publish_method: str
    stream_method: str
    publish_response: Any  # a generated response message class
    stream_response: Any
    #: Device data the enricher reads; False for control traffic (command status), which
    #: ingest relays instead (docs/commands.md).
    enriched: bool = True


ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint(
        "telemetry",
        "ingest.telemetry.v1",
        "PublishTelemetry",
        "StreamTelemetry",
        api.PublishTelemetryResponse,
        api.StreamTelemetryResponse,
    ),
    Endpoint(
        "alarms",
        "ingest.alarms.v1",
        "PublishAlarms",
        "StreamAlarms",
        api.PublishAlarmsResponse,
        api.StreamAlarmsResponse,
    ),
    # Command status reports from gateways (docs/commands.md): ordinary device messages,
    # so they are spooled and retried like telemetry; ingest relays them to
    # command-status.v1.
    Endpoint(
        "command-status",
        "ingest.command-status.v1",
        "PublishCommandStatus",
        "StreamCommandStatus",
        commands_api.PublishCommandStatusResponse,
        commands_api.StreamCommandStatusResponse,
        enriched=False,
    ),
)
#: Endpoints by name.
BY_NAME: dict[str, Endpoint] = {ep.name: ep for ep in ENDPOINTS}
#: Endpoint names, in the API's order.
NAMES: tuple[str, ...] = tuple(BY_NAME)
#: The endpoint gateways report command states on.
COMMAND_STATUS = "command-status"
#: Content type of a command status report (a headwater.commands.v1.CommandStatus).
COMMAND_STATUS_CONTENT_TYPE = "application/vnd.headwater.command-status.v1+protobuf"
