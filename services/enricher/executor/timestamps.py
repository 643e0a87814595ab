"""Epoch milliseconds <-> ``google.protobuf.Timestamp``, on the keyed state's hot path.

The same as ``Timestamp.FromMilliseconds`` and ``ToMilliseconds``, written out because the
library's versions are Python code, run several times per message.
"""

from __future__ import annotations

from google.protobuf.timestamp_pb2 import Timestamp


def set_ms(ts: Timestamp, ms: int) -> None:
    """Set ``ts`` to ``ms`` milliseconds since the epoch."""
    ts.seconds, ts.nanos = ms // 1000, ms % 1000 * 1_000_000


def timestamp(ms: int) -> Timestamp:
    """Return a new Timestamp of ``ms`` milliseconds since the epoch."""
    ts = Timestamp()
    set_ms(ts, int(ms))
    return ts


def ms_of(ts: Timestamp) -> int:
    """Return ``ts`` in milliseconds since the epoch (sub-millisecond part dropped)."""
    return ts.seconds * 1000 + ts.nanos // 1_000_000
