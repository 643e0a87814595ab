"""The connectors bench's reading of how busy the CPUs were over a phase (``/proc/stat``)."""

from __future__ import annotations

import os

from headwater_dev.bench.connectors.machine_busy import busy_share, cpu_ticks


def test_the_machine_and_every_cpu_are_read() -> None:
    ticks = cpu_ticks()
    assert {"cpu", *(f"cpu{n}" for n in os.sched_getaffinity(0))} <= set(ticks)
    assert all(0 <= busy <= total for busy, total in ticks.values())


def test_the_busy_share_is_busy_ticks_over_all_ticks_between_two_readings() -> None:
    before = {"cpu": (1_000, 4_000), "cpu1": (500, 2_000)}
    after = {"cpu": (1_900, 5_000), "cpu1": (1_000, 2_500)}
    assert busy_share(before, after, "cpu") == 0.9
    assert busy_share(before, after, "cpu1") == 1.0
    # No tick between the readings: nothing was busy.
    assert busy_share(before, before, "cpu") == 0.0
