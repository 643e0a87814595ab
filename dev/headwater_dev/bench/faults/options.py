"""What one run of ``headwater bench faults`` offers (kept light: the CLI reads it)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FaultsOptions:
    """The load and the bounds of one run (issue 36's rate by default)."""

    #: Readings spooled per second, open loop, whatever the answers.
    rate: float = 5000.0
    payload: int = 200
    #: Load before each fault, and after the first OK once a leader was killed.
    steady_s: float = 10.0
    #: The longest wait for a fault to pass (a new leader, then an OK on its partitions)
    #: and the longest calm window (as long as the roll, at most this).
    seconds: float = 120.0
