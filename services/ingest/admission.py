"""Bound the bytes a process holds in flight, so overload answers instead of growing."""

from __future__ import annotations

from headwater.ingest.errors import OverloadedError


class InflightBudget:
    """A non-blocking byte budget: a call either fits now or is told to come back later.

    Waiting for room would queue callers in memory, which is the growth this prevents;
    RESOURCE_EXHAUSTED with a retry delay moves the waiting to the gateway's spool.
    """

    def __init__(self, max_bytes: int, retry_delay_s: float) -> None:
        self.max_bytes = max_bytes
        self.in_use = 0
        self._retry_delay_s = retry_delay_s

    def acquire(self, n: int) -> None:
        """Take ``n`` bytes or raise OverloadedError."""
        if self.in_use + n > self.max_bytes:
            raise OverloadedError(
                f"ingest process is at its in-flight limit ({self.max_bytes} bytes); "
                f"retry after {self._retry_delay_s:.2f}s or send to another replica",
                retry_delay_s=self._retry_delay_s,
            )
        self.in_use += n

    def release(self, n: int) -> None:
        """Give back ``n`` bytes taken by :meth:`acquire`."""
        self.in_use -= n
