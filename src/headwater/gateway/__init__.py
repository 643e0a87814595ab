"""Gateway client: a durable local spool and a sender to the ingest service.

The names a gateway needs; the rest lives in the modules (see docs/gateway.md).
"""

from headwater.gateway.answers import Outcome
from headwater.gateway.client import GatewayClient
from headwater.gateway.config import GatewayConfig, TlsConfig
from headwater.gateway.errors import (
    CallFailedError,
    GatewayError,
    SpoolFullError,
    SpoolLockedError,
)
from headwater.gateway.records import Enqueued, NewMessage, SpoolLimits, SpoolStats
from headwater.gateway.spool import Spool

__all__ = [
    "CallFailedError",
    "Enqueued",
    "GatewayClient",
    "GatewayConfig",
    "GatewayError",
    "NewMessage",
    "Outcome",
    "Spool",
    "SpoolFullError",
    "SpoolLimits",
    "SpoolLockedError",
    "SpoolStats",
    "TlsConfig",
]
