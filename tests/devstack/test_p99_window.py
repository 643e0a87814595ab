"""When the end-to-end p99 was back under 2 s after a fault, over windows of send times."""

from __future__ import annotations

import math

from headwater_dev.devstack.p99_window import HOLD_S, back_under, seconds_back_under
from tests.support.latency_spans import at_ten_a_second

FAULT_MS = 5_000_000.0


def _sent(spans: list[tuple[float, float, float]]) -> tuple[list[float], list[float]]:
    """Return (sent_ms, latency_ms): 10 a second over each (from_s, to_s, latency_ms)."""
    return at_ten_a_second(FAULT_MS, spans)


def test_back_once_the_window_has_slid_past_the_last_late_message() -> None:
    # Before the fault 300 ms; messages sent in the 12 s after it wait for a restart.
    sent, latency = _sent([(-10, 0, 300), (0, 12, 9_000), (12, 60, 400)])
    # The last late message was sent at 11.9 s: every window up to the step at 16.5 s holds it.
    assert seconds_back_under(sent, latency, FAULT_MS, FAULT_MS + 60_000) == 17.0


def test_not_back_while_not_held_or_a_message_never_completed() -> None:
    late = _sent([(0, 50, 3_000), (50, 80, 400)])
    # Back at 55 s (the window past the last 3 s latency), but seen so only to 60 s < HOLD_S.
    assert seconds_back_under(*late, FAULT_MS, FAULT_MS + 60_000) is None
    assert seconds_back_under(*late, FAULT_MS, FAULT_MS + (55 + HOLD_S) * 1000) == 55.0
    sent, latency = _sent([(0, 60, 400)])
    latency[300] = math.inf  # one message never completed: its window never recovers
    assert seconds_back_under(sent, latency, FAULT_MS, FAULT_MS + 60_000) == 35.0
    # Nothing completed for 10 s after the fault (a driver restarting): not back before the
    # window has slid past the last of those messages, however they are placed.
    stalled = _sent([(-10, 0, 400), (0, 10, math.inf), (10, 60, 400)])
    assert seconds_back_under(*stalled, FAULT_MS, FAULT_MS + 60_000) == 15.0
    silent = _sent([(0, 5, 400), (30, 60, 400)])  # nothing sent: nothing came out
    assert seconds_back_under(*silent, FAULT_MS, FAULT_MS + 60_000) == 30.0


def test_back_under_ignores_steps_before_not_before() -> None:
    steps = [(1.0, 100.0), (2.0, 100.0), (3.0, 100.0)]
    assert back_under(steps) == 1.0
    assert back_under(steps, not_before_ms=2.0) == 2.0
    assert back_under([*steps, (4.0, 2_001.0)]) is None
