"""What a handler receives, and how records become messages with a stable id.

A decoder turns a record's bytes into the generated class and the id duplicates are
recognised by. The id must be the same every time the same fact is delivered again (a
crash before the commit, a Spark replay of a micro-batch), and different for different
facts.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from google.protobuf.message import Message

from headwater.proto.events.v1.completion_pb2 import Completion, Outcome
from headwater.proto.events.v1.event_pb2 import Event

M = TypeVar("M", bound=Message)


@dataclass(frozen=True)
class Delivery(Generic[M]):
    """One record for the handler: the decoded message, its stable id and where it was."""

    message: M
    #: The id it is deduplicated by (``event_id`` for events; see ``completion_key``).
    key: str
    topic: str
    partition: int
    offset: int
    #: The record's Kafka key (the device id on every Headwater topic).
    record_key: bytes | None
    headers: tuple[tuple[str, bytes], ...]

    def header(self, name: str) -> bytes | None:
        """Return the last value of header ``name`` (for example ``traceparent``), or None."""
        values = [v for k, v in self.headers if k == name]
        return values[-1] if values else None


#: Bytes in, (message, stable id) out; raise on anything that is not such a message.
Decoder = Callable[[bytes], tuple[M, str]]
#: Do the work for one delivery; return when done, raise to have it retried.
Handler = Callable[[Delivery[M]], Awaitable[None]]


def completion_key(c: Completion) -> str:
    """Return the stable id of a completion.

    A Completion has no id of its own; what identifies it is the device message
    (``message_id``), the input record it is about (its ``source`` coordinate: a gateway
    resend is another record and gets its own DUPLICATE completion), and the outcome and
    attempt (a message can be RETRY_SCHEDULED at attempt 1 and ENRICHED at attempt 2).
    A Spark replay repeats all of them, so a replayed completion has the same key.
    """
    s = c.source
    return (
        f"{c.message_id}@{s.topic}/{s.partition}/{s.offset}:{Outcome.Name(c.outcome)}:{c.attempt}"
    )


def decode_completion(value: bytes) -> tuple[Completion, str]:
    """Decode a ``Completion`` (topic ``completions.v1``); its key is ``completion_key``."""
    c = Completion.FromString(value)
    if not c.message_id or not c.outcome:
        raise ValueError("not a Completion: message_id and outcome are required")
    return c, completion_key(c)


def decode_event(value: bytes) -> tuple[Event, str]:
    """Decode a common-format ``Event`` (topics ``events.<type>.v1``); its key is ``event_id``."""
    e = Event.FromString(value)
    if not e.event_id:
        raise ValueError("not an Event: event_id is required")
    return e, e.event_id
