"""Dead letters for records the producer refuses (stage "produce").

The sink produces records the keyed state built; the producer may refuse one for good
(larger than ``message.max.bytes``, for example). That is a property of the data, so the
record becomes a dead letter, as bad input does, instead of failing the task forever.
The refused record itself is not copied (it may be the problem: too large); the dead
letter names the message (id, tenant, source coordinates) and what was refused.
"""

from __future__ import annotations

from headwater import record_headers as rh
from headwater.proto.events.v1 import completion_pb2, dead_letter_pb2
from headwater.topics import split_scoped_key

STAGE = "produce"
REASON = "PRODUCE_REFUSED"


def source_of_ref(ref: str | None) -> completion_pb2.SourceRecord | None:
    """Return the source coordinate in a sink ``ref`` ("<topic>/<partition>/<offset>")."""
    if not ref:
        return None
    topic, _, rest = ref.rpartition("/")
    topic, _, partition = topic.rpartition("/")
    try:
        return completion_pb2.SourceRecord(topic=topic, partition=int(partition), offset=int(rest))
    except ValueError:
        return None


def dead_letter(
    topic: str,
    key: bytes | None,
    value: bytes | None,
    headers: list[tuple[str, bytes]],
    ref: str | None,
    role: str,
    exc: BaseException,
) -> tuple[bytes, bytes]:
    """Return (key, value) of the dead letter of a refused record."""
    h = dict(headers)
    message_id = (h.get(rh.MESSAGE_ID) or b"").decode("utf-8", "replace")
    device = (key or b"").decode("utf-8", "replace")
    letter = dead_letter_pb2.DeadLetter(
        message_id=message_id,
        device_id=split_scoped_key(device)[1],  # state records are keyed by scoped_key
        stage=STAGE,
        reason=REASON,
        error_class=type(exc).__name__,
        error_message=(
            f"the producer refused the {role} record for {topic} ({len(value or b'')} bytes): {exc}"
        )[:1000],
        attempts=1,
        original_headers=[dead_letter_pb2.Header(key=k, value=v or b"") for k, v in headers],
    )
    source = source_of_ref(ref)
    if source is not None:
        letter.source.CopyFrom(source)
    return key or b"", letter.SerializeToString()


def dead_lettered(completion: bytes, exc: BaseException) -> bytes:
    """Return an ENRICHED completion rewritten as DEAD_LETTERED (its events were refused)."""
    c = completion_pb2.Completion.FromString(completion)
    c.outcome = completion_pb2.OUTCOME_DEAD_LETTERED
    c.reason = REASON
    del c.events[:]
    return c.SerializeToString()
