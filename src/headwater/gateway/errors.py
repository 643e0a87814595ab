"""Errors of the gateway library, under one root so callers can catch them all at once.

Each carries what a caller needs to act on it, and ``retriable`` says whether the same
thing may succeed later without anybody changing anything.
"""

from __future__ import annotations

from pathlib import Path

import grpc

from headwater.errors import HeadwaterError


class GatewayError(HeadwaterError):
    """Root of every error the gateway library raises on purpose."""


class SpoolFullError(GatewayError):
    """The spool refused a message: it is full (policy ``refuse``) or the message outsizes it.

    Nothing of the refused call was written, and no sequence number was used up. It is
    retriable: once the link is back and the spool drains, the same enqueue succeeds
    (unless ``message_bytes`` exceeds ``max_bytes``).
    """

    def __init__(self, path: Path, used_bytes: int, max_bytes: int, message_bytes: int) -> None:
        self.path = path
        self.used_bytes = used_bytes
        self.max_bytes = max_bytes
        self.message_bytes = message_bytes
        if message_bytes > max_bytes:
            text = (
                f"{message_bytes} bytes to spool at once: larger than the whole spool "
                f"({max_bytes} bytes)"
            )
        else:
            text = (
                f"spool {path} is full ({used_bytes} of {max_bytes} bytes); the link or the "
                "ingest service has been down for a while"
            )
        super().__init__(text)

    @property
    def retriable(self) -> bool:  # type: ignore[override]
        """True unless the message can never fit."""
        return self.message_bytes <= self.max_bytes


class SpoolLockedError(GatewayError):
    """Another process has this spool open: two senders would send every message twice."""

    def __init__(self, path: Path) -> None:
        self.path = path
        super().__init__(f"spool {path} is open in another process; run one sender per spool")


class CallFailedError(GatewayError):
    """A call or stream failed as a whole; every message in it stays spooled.

    ``reason`` is the server's ``google.rpc.ErrorInfo`` reason (or the status text), and
    ``retry_delay_s`` its ``RetryInfo`` delay (0 when it sent none).
    """

    retriable = True  # the sender always tries again: messages are never dropped for it

    def __init__(self, code: grpc.StatusCode, reason: str, retry_delay_s: float = 0.0) -> None:
        super().__init__(f"{code.name}: {reason}")
        self.code = code
        self.reason = reason
        self.retry_delay_s = retry_delay_s
