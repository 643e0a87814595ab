"""Time-ordered ids (UUIDv7, RFC 9562): the gateway's message ids, the sender's command ids.

Shared by ``headwater.gateway`` (assigned when a message is enqueued) and
``headwater.commands`` (a command sent without an id), so neither imports the other for it.
Time-ordered ids sort like the spool and the logs, and the ingest contract asks for them
(``message_id``: 1-64 characters of ``[A-Za-z0-9._:-]``). Within one millisecond the
12-bit ``rand_a`` field counts up, so ids of one process are strictly increasing.
"""

from __future__ import annotations

import os
import random
import threading
import time
import uuid

_lock = threading.Lock()
# A generator of our own (a caller seeding the shared one must not make ids repeat),
# seeded from os.urandom, and again in a forked child so processes never share a stream.
_random = random.Random()
os.register_at_fork(after_in_child=_random.seed)

_last_ms = 0
_counter = 0


def uuid7(now_ms: int | None = None) -> str:
    """Return a new UUIDv7 as text; increasing within this process."""
    global _last_ms, _counter
    with _lock:
        ms = int(time.time() * 1000) if now_ms is None else now_ms
        if ms <= _last_ms:
            ms = _last_ms
            _counter += 1
            if _counter > 0xFFF:  # 4096 ids in one millisecond: borrow the next one
                ms, _counter = ms + 1, 0
        else:
            _counter = 0
        _last_ms = ms
        # With the millisecond and the counter, 62 random bits make a collision between
        # gateways negligible, at no system call per id.
        rand_b = _random.getrandbits(62)
        value = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | _counter << 64 | 0b10 << 62 | rand_b
    h = f"{value:032x}"  # what str(uuid.UUID(int=value)) gives, at a fraction of the cost
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def timestamp_ms(message_id: str) -> int:
    """Return the millisecond timestamp a UUIDv7 carries."""
    return uuid.UUID(message_id).int >> 80
