"""What a handler receives, and how records become messages with a stable id.

A decoder turns a record's bytes into the generated class and the id duplicates are
recognised by. The id must be the same every time the same fact is delivered again (a
crash before the commit, a Spark replay of a micro-batch), and different for different
facts.
"""

from __future__ import annotations

import json
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
    """Return the stable id of a completion: which message, and what happened to it.

    A Completion has no id of its own. The message is ``(tenant, device_id, message_id)``
    (message ids are unique per tenant and device only); the fact about it is the outcome
    and the attempt (a message can be RETRY_SCHEDULED at attempt 1 and ENRICHED at
    attempt 2). For ENRICHED the source offset is left out on purpose: a gateway resend of
    the same message is another ingest record, and once it is enriched again (after the
    enricher's dedup window) its second ENRICHED completion is a repeat of the first, as is
    a Spark replay.

    Every other outcome adds its reason and its source record: a redriven message is a new
    ingest record (the Completion carries no redrive count; its source stands in for one),
    and when it is retried or dead-lettered again at the same attempt, that is news (its
    reason may differ), while a Spark replay of the same record is still a repeat. The key
    is JSON, so no choice of the parts can collide with another's.

    Args:
        c: The completion.

    Returns:
        The key the dedup store records, for example
        ``["acme","pump-1","m-17","OUTCOME_ENRICHED",1]`` or
        ``["acme","pump-1","m-17","OUTCOME_DEAD_LETTERED",1,"UNIT_UNKNOWN",
        "ingest.telemetry.v1",3,1207]``.
    """
    parts: list[object] = [c.tenant, c.device_id, c.message_id, Outcome.Name(c.outcome)]
    parts.append(c.attempt)
    if c.outcome != Outcome.OUTCOME_ENRICHED:
        parts += [c.reason, c.source.topic, c.source.partition, c.source.offset]
    return json.dumps(parts, separators=(",", ":"), ensure_ascii=False)


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
