"""Building commands and status records, and the order of states.

Kept free of Kafka so the sender, ingest and the gateway library share it.
"""

from __future__ import annotations

import time

from headwater.proto.commands.v1.command_pb2 import Command
from headwater.proto.commands.v1.command_status_pb2 import CommandState, CommandStatus
from headwater.topics import scoped_key

#: The largest payload a command may carry (the contract's max_len on Command.payload).
MAX_PAYLOAD_BYTES = 64 * 1024
#: How long a command waits for its gateway when the sender names no TTL.
DEFAULT_TTL_S = 3600.0

#: States after which nothing more happens to a command.
FINAL_STATES = frozenset(
    {
        CommandState.COMMAND_STATE_EXECUTED,
        CommandState.COMMAND_STATE_FAILED,
        CommandState.COMMAND_STATE_EXPIRED,
        CommandState.COMMAND_STATE_REJECTED,
    }
)
#: States that mean ingest need not deliver the command (again).
NOT_TO_DELIVER = FINAL_STATES | {CommandState.COMMAND_STATE_DELIVERED}
#: Short names, as the CLI prints and accepts them.
STATE_NAMES = {v: k.removeprefix("COMMAND_STATE_") for k, v in CommandState.items() if v != 0}


def state_name(state: int) -> str:
    """Return "QUEUED", "DELIVERED", ... for a CommandState value."""
    return STATE_NAMES.get(state, "UNSPECIFIED")


def rank(state: int) -> int:
    """Order of states in a command's life: a later record with a lower rank is a repeat.

    Statuses arrive at least once and from several writers (sender, ingest, gateway), so
    "the newest record" is not "the latest state": a resent DELIVERED may land after
    EXECUTED. Final states outrank DELIVERED, which outranks QUEUED.
    """
    if state in FINAL_STATES:
        return 3
    ranks: dict[int, int] = {
        CommandState.COMMAND_STATE_DELIVERED: 2,
        CommandState.COMMAND_STATE_QUEUED: 1,
    }
    return ranks.get(state, 0)


def command_key(command: Command | CommandStatus) -> bytes:
    """The Kafka key of a command and of its statuses: ``<tenant>/<device_id>``."""
    return scoped_key(command.tenant, command.device_id).encode()


def status_of(
    command: Command,
    state: int,
    reason: str = "",
    gateway_id: str = "",
    result: bytes = b"",
    at_ms: int | None = None,
) -> CommandStatus:
    """Return a status record of ``command`` in ``state``."""
    status = CommandStatus(
        command_id=command.command_id,
        tenant=command.tenant,
        device_id=command.device_id,
        state=state,  # type: ignore[arg-type]
        reason=reason,
        gateway_id=gateway_id,
        result=result,
        correlation_data=command.correlation_data,
        name=command.name,
    )
    status.time.FromMilliseconds(now_ms() if at_ms is None else at_ms)
    return status


def expired(command: Command, at_ms: int | None = None) -> bool:
    """True when ``command``'s expires_time has passed."""
    return command.expires_time.ToMilliseconds() <= (now_ms() if at_ms is None else at_ms)


def now_ms() -> int:
    """Milliseconds since the epoch."""
    return int(time.time() * 1000)
