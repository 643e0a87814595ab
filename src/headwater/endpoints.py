"""The ingest API's endpoints: one row per endpoint, its RPCs, response types and ingest topic.

Ingest serves these RPCs and writes each endpoint to its own topic; the gateway library
spools and sends by endpoint name; ``topics`` creates the topics. All of them read this
table, so adding an endpoint is one row here (and its RPCs in ``proto/``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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
)
#: Endpoints by name.
BY_NAME: dict[str, Endpoint] = {ep.name: ep for ep in ENDPOINTS}
#: Endpoint names, in the API's order.
NAMES: tuple[str, ...] = tuple(BY_NAME)
