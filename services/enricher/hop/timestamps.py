"""``google.protobuf.Timestamp`` -> epoch milliseconds, on the hop's hot path.

The same as ``Timestamp.ToMilliseconds``, written out because the library's version is Python
code, run once per message.
"""

from __future__ import annotations

from google.protobuf.timestamp_pb2 import Timestamp


def ms_of(ts: Timestamp) -> int:
    """Return ``ts`` in milliseconds since the epoch (sub-millisecond part dropped)."""
    return ts.seconds * 1000 + ts.nanos // 1_000_000
