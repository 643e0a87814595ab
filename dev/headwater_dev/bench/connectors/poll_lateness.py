"""How late each poll of a fixed-interval poller began against its schedule.

The schedule is the first poll's time plus whole intervals, so a poller that drifts or
stalls shows as lateness; a step between polls under half an interval or over one and
a half means a poll was bunched up or skipped. Shared by ``headwater bench
gateway-connectors`` and the Modbus figures test.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class PollLateness:
    """Lateness of a run of polls, in ms (p99 is the largest but one in a hundred)."""

    polls: int
    p50_ms: int
    p99_ms: int
    max_ms: int
    min_ms: int
    #: Steps between consecutive polls outside 0.5-1.5 intervals: skipped or bunched polls.
    irregular_steps_ms: list[int]


def poll_lateness(times_ms: Sequence[int], interval_ms: int) -> PollLateness:
    """Measure ``times_ms`` (each poll's start, in order; at least one) against the schedule."""
    first = times_ms[0]
    late = sorted(t - first - round((t - first) / interval_ms) * interval_ms for t in times_ms)
    steps = [b - a for a, b in itertools.pairwise(times_ms)]
    return PollLateness(
        polls=len(times_ms),
        p50_ms=late[len(late) // 2],
        p99_ms=late[int(len(late) * 0.99)],
        max_ms=late[-1],
        min_ms=late[0],
        irregular_steps_ms=[s for s in steps if not 0.5 * interval_ms < s < 1.5 * interval_ms],
    )
