"""The event id as docs/enricher.md defines it, to check the ids the enricher writes.

A test oracle written from the definition (UUIDv5 of a fixed namespace and the compact JSON
name ``[tenant, device_id, message_id, index]``), not the enricher's code: the JVM operator
computes ids its own way (``EventIds.java``) and must agree with this.
"""

from __future__ import annotations

import json
import uuid

#: The namespace of every event id (never changes).
NAMESPACE = uuid.UUID("5b0e3d0c-8f4b-5a3e-9c52-6865616477a1")


def event_id(tenant: str, device_id: str, message_id: str, index: int) -> str:
    """Return the id of event ``index`` of a message."""
    name = json.dumps([tenant, device_id, message_id, index], separators=(",", ":"))
    return str(uuid.uuid5(NAMESPACE, name))
