"""The one error a sender sees: a command that was refused before anything was written."""

from __future__ import annotations

from headwater.errors import HeadwaterError


class CommandRefusedError(HeadwaterError, ValueError):
    """The command was not written; ``reason`` is stable, the message says what to do."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        #: UPPER_SNAKE_CASE: TENANT_NOT_PERMITTED, UNKNOWN_TENANT, UNKNOWN_DEVICE,
        #: PAYLOAD_TOO_LARGE, ALREADY_EXPIRED, INVALID_COMMAND.
        self.reason = reason
