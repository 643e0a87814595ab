"""Text that every encoder accepts, so that one unencodable value cannot fail a task.

A normalized value may hold a string no encoder accepts: a JSON escape of U+D800 parses
to a lone surrogate, which is not UTF-8, so Arrow, protobuf and Kafka all refuse it.
Raising inside the query would crash-loop it on replay, stopping every device; so a
message with such a value is a dead letter of stage ``encode`` (``normalize.py``), and
error texts that may quote input are sanitized before they are encoded.
"""

from __future__ import annotations

import json
from typing import Any

#: The stage and reason of a row whose values cannot be encoded.
STAGE = "encode"
REASON = "UNENCODABLE_VALUE"


def sanitize(value: Any) -> Any:
    """Return ``value`` with every string made valid UTF-8 (bad characters become "?")."""
    if isinstance(value, str):
        return value.encode("utf-8", "replace").decode("utf-8")
    if isinstance(value, dict):
        return {k: sanitize(v) for k, v in value.items()}
    if isinstance(value, list):
        return [sanitize(v) for v in value]
    return value


def encodable(value: Any) -> bool:
    """Return True when every string in ``value`` (JSON-like: dicts, lists) encodes as UTF-8."""
    try:
        # The C encoder walks the whole value (keys too) far faster than Python could.
        json.dumps(value, ensure_ascii=False, default=repr).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
