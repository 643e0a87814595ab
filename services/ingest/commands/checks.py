"""The checks of a command read from commands.v1, before it may be delivered.

The sender checks first, but anything with produce rights on commands.v1 can write a
command without it: ingest checks again what it can judge alone, so such a command is
REJECTED with the reason instead of delivered. Checked: the contract (payload at most
64 KiB, the fields' rules) and the record's key (``<tenant>/<device_id>``: a command keyed
otherwise is in a partition of another device, and its order is not kept). The tenant and
device binding is kept by delivery itself: only a gateway of the command's tenant bound to
its device is sent it. Expiry: a command past its expiry is EXPIRED, never delivered.
"""

from __future__ import annotations

from headwater.commands import model
from headwater.commands.checks import check_command
from headwater.commands.errors import CommandRefusedError
from headwater.proto.commands.v1.command_pb2 import Command


def delivery_refusal(command: Command, key: bytes | None) -> tuple[str, str] | None:
    """(reason, message) if ``command``, read with ``key``, must not be delivered; else None."""
    try:
        check_command(command)
    except CommandRefusedError as refused:
        return refused.reason, str(refused)
    if key != model.command_key(command):
        return (
            "KEY_MISMATCH",
            f"the record's key is {key!r}, not {model.command_key(command)!r} "
            "(<tenant>/<device_id>): its device's commands would not stay in order",
        )
    return None
