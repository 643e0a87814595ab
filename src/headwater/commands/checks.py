"""The checks a command passes wherever it is judged.

By its sender, and again by ingest before delivery: a service with produce rights on
commands.v1 can bypass the sender.
"""

from __future__ import annotations

from headwater.commands.errors import CommandRefusedError
from headwater.commands.model import MAX_PAYLOAD_BYTES
from headwater.proto.commands.v1.command_pb2 import Command


def check_command(command: Command) -> None:
    """Raise CommandRefusedError (PAYLOAD_TOO_LARGE, INVALID_COMMAND) if it breaks the contract."""
    from headwater.ingest.write.validation import compile_checks, message_violations

    if len(command.payload) > MAX_PAYLOAD_BYTES:
        raise CommandRefusedError(
            "PAYLOAD_TOO_LARGE",
            f"payload is {len(command.payload)} bytes; a command carries at most "
            f"{MAX_PAYLOAD_BYTES}. Send a reference (a URL) to larger data",
        )
    found = message_violations(command, compile_checks(Command.DESCRIPTOR))
    if found:
        raise CommandRefusedError(
            "INVALID_COMMAND", "; ".join(f"{field} {problem}" for field, problem in found)
        )
