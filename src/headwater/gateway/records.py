"""What goes into the spool and what comes out of it: plain, frozen values.

Kept apart from the spool so the sender, the metrics and callers can name them without
pulling in SQLite.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from headwater import endpoints
from headwater.proto.device.v1 import device_message_pb2

WhenFull = Literal["refuse", "drop_oldest"]
#: The ingest API's endpoints; each has its own topic, sender and stream.
ENDPOINTS = endpoints.NAMES
#: Spool counters that mean a message was lost on purpose (by policy), by reason.
DROP_REASONS = ("dropped_oldest", "expired", "refused")


@dataclass(frozen=True)
class SpoolLimits:
    """How much a spool may hold, and what happens when it is full."""

    #: Bytes of envelopes waiting to be sent.
    max_bytes: int = 256 * 1024 * 1024
    #: Messages older than this are dropped (counted as ``expired``); 0 keeps them forever.
    max_age_s: float = 7 * 24 * 3600
    #: "refuse": enqueue raises SpoolFullError; "drop_oldest": the oldest make room.
    when_full: WhenFull = "drop_oldest"

    def __post_init__(self) -> None:
        if self.max_bytes <= 0 or self.max_age_s < 0:
            raise ValueError("max_bytes must be positive and max_age_s not negative")
        if self.when_full not in ("refuse", "drop_oldest"):
            raise ValueError(f"when_full must be 'refuse' or 'drop_oldest', not {self.when_full!r}")


@dataclass(frozen=True)
class NewMessage:
    """A device reading to spool; the spool assigns its message id and sequence."""

    device_id: str
    content_type: str
    payload: bytes
    #: When the device produced it (ms since the epoch); default: when it is spooled.
    device_time_ms: int | None = None
    attributes: Mapping[str, str] | None = None


@dataclass(frozen=True)
class Enqueued:
    """What one enqueue did: the messages as spooled, and what was lost to make room.

    Drops are reported here (so the caller can log or act at once), counted in the spool
    file and exported as metrics.
    """

    #: The spooled messages, with the ids and sequence numbers they were given.
    messages: tuple[device_message_pb2.DeviceMessage, ...]
    #: Ids of older messages deleted to make room (policy ``drop_oldest``).
    dropped: tuple[str, ...] = ()
    #: Messages older than ``max_age_s`` deleted in the same transaction.
    expired: int = 0

    @property
    def message(self) -> device_message_pb2.DeviceMessage:
        """The one message of a single enqueue."""
        return self.messages[0]

    @property
    def message_id(self) -> str:
        """The id of the one message of a single enqueue."""
        return self.messages[0].message_id


@dataclass(frozen=True)
class DueMessage:
    """A spooled message due for sending."""

    seq: int
    message_id: str
    endpoint: str
    envelope: bytes
    attempts: int


@dataclass(frozen=True)
class Rejected:
    """A message the ingest service refused for good, and why."""

    message_id: str
    endpoint: str
    envelope: bytes
    code: str
    reason: str
    detail: str


@dataclass(frozen=True)
class SpoolStats:
    """Depth, size, age of the oldest message, and what happened so far (all time)."""

    depth: int
    bytes: int
    oldest_age_s: float
    counters: Mapping[str, int]
