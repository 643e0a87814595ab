"""Poll lateness against a fixed schedule: late polls, skipped and bunched polls."""

from __future__ import annotations

from headwater_dev.bench.connectors.poll_lateness import poll_lateness


def test_on_schedule_polls_are_not_late() -> None:
    late = poll_lateness([10_000 + 1000 * i for i in range(100)], 1000)
    assert (late.polls, late.p50_ms, late.p99_ms, late.max_ms, late.min_ms) == (100, 0, 0, 0, 0)
    assert late.irregular_steps_ms == []


def test_lateness_is_measured_from_the_first_poll_plus_whole_intervals() -> None:
    # 100 polls: one 80 ms late, one 30 ms late, one 5 ms early.
    times = [1000 * i for i in range(100)]
    times[10] += 80
    times[20] += 30
    times[30] -= 5
    late = poll_lateness(times, 1000)
    assert (late.p50_ms, late.p99_ms, late.max_ms, late.min_ms) == (0, 80, 80, -5)
    assert late.irregular_steps_ms == []


def test_a_skipped_and_a_bunched_poll_are_irregular_steps() -> None:
    # A poll missing between 1000 and 3000; one at 3400, bunched up after 3000.
    late = poll_lateness([0, 1000, 3000, 3400, 4000], 1000)
    assert late.irregular_steps_ms == [2000, 400]
