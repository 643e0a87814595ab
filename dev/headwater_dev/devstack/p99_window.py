"""When end-to-end latency came back after a fault: a sliding window's p99 under a bound.

Issues 36 and 40 set one target for every fault the enricher goes through (a broker's leader
lost, a rolling restart, an executor or the driver killed, a backlog released): the
end-to-end p99 back under 2 s within 30 s. The p99 is that of the messages in a window of
``WINDOW_S`` seconds sliding by ``STEP_S``; what places a message in a window is the caller's:
when its completion was seen (the benchmark's recovery phase) or when it was sent (the fault
tests and ``make run ARGS="--brokers 3 --chaos"``). A window holding no message is infinite:
nothing came out of it. Used by the benchmark, the dev stack's summary and the fault tests.
"""

from __future__ import annotations

import bisect
import math
import sys
from collections.abc import Sequence

from headwater.runtime.stats import percentile

#: The p99 a recovered pipeline holds (milliseconds).
P99_BOUND_MS = 2000.0
#: The sliding window the p99 is taken over, and the step it slides by (seconds).
WINDOW_S = 5.0
STEP_S = 0.5
#: How long the p99 must stay under the bound before it counts as back (seconds).
HOLD_S = 15.0


def window_p99(times_ms: Sequence[float], latency_ms: Sequence[float], end_ms: float) -> float:
    """Return the p99 (ms) of the messages whose time is in the ``WINDOW_S`` before ``end_ms``.

    ``times_ms`` is in order, ``latency_ms[i]`` the latency of message ``i``: ``math.inf``
    for one that has not completed (yet).
    """
    first = bisect.bisect_right(times_ms, end_ms - WINDOW_S * 1000)
    last = bisect.bisect_right(times_ms, end_ms)
    if last == first:
        return math.inf
    # Interpolating between two infinities gives NaN, which no bound is under: a message
    # that never completed counts as the largest float, as late as any comparison needs.
    return percentile([min(v, sys.float_info.max) for v in latency_ms[first:last]], 99)


def p99_steps(
    times_ms: Sequence[float], latency_ms: Sequence[float], from_ms: float, to_ms: float
) -> list[tuple[float, float]]:
    """Return (window's end, its p99) at each step after ``from_ms`` up to ``to_ms`` (ms)."""
    steps = []
    t = from_ms + STEP_S * 1000
    while t <= to_ms:
        steps.append((t, window_p99(times_ms, latency_ms, t)))
        t += STEP_S * 1000
    return steps


def back_under(steps: list[tuple[float, float]], not_before_ms: float = -math.inf) -> float | None:
    """Return the first step from which every window's p99 is at or under the bound.

    Only steps at or after ``not_before_ms`` count; None when the last step is over it.
    """
    back = None
    for t, p99 in reversed(steps):
        if p99 > P99_BOUND_MS or t < not_before_ms:
            break
        back = t
    return back


def seconds_back_under(
    times_ms: Sequence[float], latency_ms: Sequence[float], fault_ms: float, ended_ms: float
) -> float | None:
    """Return the seconds from ``fault_ms`` until the p99 was back under the bound for good.

    For good: every window from then to ``ended_ms`` at or under the bound, for at least
    ``HOLD_S``; None when it was not (yet).
    """
    back = back_under(p99_steps(times_ms, latency_ms, fault_ms, ended_ms))
    if back is None or ended_ms - back < HOLD_S * 1000:
        return None
    return round((back - fault_ms) / 1000, 1)
