"""Commands to devices: send them, follow their states (docs/commands.md).

Services send with :class:`CommandSender`; operators with ``headwater command``. Ingest
delivers them to gateways (``headwater.ingest.commands``) and the gateway library runs
them (``headwater.gateway.commands``).
"""

from headwater.commands.errors import CommandRefusedError
from headwater.commands.model import FINAL_STATES, STATE_NAMES, state_name
from headwater.commands.sender import CommandSender, KnownDevices, SentCommand

__all__ = [
    "FINAL_STATES",
    "STATE_NAMES",
    "CommandRefusedError",
    "CommandSender",
    "KnownDevices",
    "SentCommand",
    "state_name",
]
