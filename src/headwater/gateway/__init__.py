"""Gateway client: a durable local spool and a sender to the ingest service.

The names a gateway needs; the rest lives in the modules (see docs/gateway.md).
"""

from headwater.gateway.answers import DeliveryReport
from headwater.gateway.client import GatewayClient
from headwater.gateway.commands import CommandHandler, RejectCommand
from headwater.gateway.config import GatewayConfig, TlsConfig
from headwater.gateway.errors import (
    CallFailedError,
    GatewayError,
    SpoolFullError,
    SpoolLockedError,
)
from headwater.gateway.records import Enqueued, NewMessage, SpoolLimits, SpoolStats
from headwater.gateway.spool import Spool

#: The earlier name of DeliveryReport, kept for one release.
Outcome = DeliveryReport

__all__ = [
    "CallFailedError",
    "CommandHandler",
    "DeliveryReport",
    "Enqueued",
    "GatewayClient",
    "GatewayConfig",
    "GatewayError",
    "NewMessage",
    "RejectCommand",
    "Spool",
    "SpoolFullError",
    "SpoolLimits",
    "SpoolLockedError",
    "SpoolStats",
    "TlsConfig",
]
