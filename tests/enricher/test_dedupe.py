"""The two-tier dedup as a pure unit: the map state is a dict with MapState's methods."""

from __future__ import annotations

from typing import Any

from headwater.enricher.python_operator.dedupe import (
    HOUR_MS,
    Dedup,
    hour_of,
    state_bytes_per_device,
)

DAY_MS = 24 * HOUR_MS
WINDOW_MS, HORIZON_MS = HOUR_MS, 7 * DAY_MS + HOUR_MS


class MapState:
    """A stand-in for transformWithState's MapState (the one method set Dedup uses)."""

    def __init__(self) -> None:
        self.data: dict[tuple[Any, ...], tuple[Any, ...]] = {}

    def getValue(self, key: tuple[Any, ...]) -> tuple[Any, ...] | None:
        return self.data.get(key)

    def updateValue(self, key: tuple[Any, ...], value: tuple[Any, ...]) -> None:
        self.data[key] = value

    def removeKey(self, key: tuple[Any, ...]) -> None:
        self.data.pop(key, None)


class Device:
    """One device's dedup across batches, carrying the composite value's two fields."""

    def __init__(self, horizon_ms: int = HORIZON_MS) -> None:
        self.older = MapState()
        self.dedup = Dedup(self.older, WINDOW_MS, horizon_ms)
        self.recent: bytes | None = None
        self.spilled: bytes | None = None

    def batch(self, now_ms: int, messages: list[tuple[str, int]]) -> list[bool]:
        """Return first_time for each (id, device_time_ms), in order, and commit."""
        self.dedup.begin(self.recent, self.spilled, messages)
        firsts = [self.dedup.first_time(m, t, now_ms) for m, t in messages]
        new = self.dedup.commit(now_ms)
        if new is not None:
            self.recent, self.spilled = new
        return firsts


T0 = 1_800_000_000_000  # a batch time in 2027


def test_repeats_within_a_batch_and_the_window_are_duplicates() -> None:
    d = Device()
    assert d.batch(T0, [("m1", T0), ("m2", T0), ("m1", T0)]) == [True, True, False]
    assert d.batch(T0 + 30 * 60_000, [("m2", T0), ("m3", T0)]) == [False, True]
    assert d.older.data == {}  # nothing moved yet: the window holds them


def test_a_resend_after_days_is_a_duplicate_and_live_traffic_reads_no_older_hours() -> None:
    d = Device()
    d.batch(T0, [("old", T0 - 10_000)])
    # Live traffic two hours later moves "old" to the older tier (its device-time hour).
    d.batch(T0 + 2 * HOUR_MS, [("live-1", T0 + 2 * HOUR_MS)])
    assert list(d.older.data) == [(hour_of(T0 - 10_000),)]
    calls = d.dedup.calls
    d.batch(T0 + 2 * HOUR_MS + 1000, [("live-2", T0 + 2 * HOUR_MS + 1000)])
    assert d.dedup.calls == calls  # a live message's hour is not in the older tier: no read
    # The gateway resends "old" (same envelope, same device time) six days later.
    assert d.batch(T0 + 6 * DAY_MS, [("old", T0 - 10_000), ("new", T0 + 6 * DAY_MS)]) == [
        False,
        True,
    ]


def test_without_an_older_tier_a_late_resend_passes() -> None:
    # The horizon is the window: the check above would fail without the older tier.
    d = Device(horizon_ms=WINDOW_MS)
    d.batch(T0, [("old", T0)])
    d.batch(T0 + 2 * HOUR_MS, [("live", T0 + 2 * HOUR_MS)])
    assert d.older.data == {}
    assert d.batch(T0 + 3 * HOUR_MS, [("old", T0)]) == [True]


def test_hours_past_the_horizon_are_forgotten() -> None:
    d = Device()
    d.batch(T0, [("old", T0)])
    d.batch(T0 + 2 * HOUR_MS, [("live", T0 + 2 * HOUR_MS)])
    assert d.older.data
    d.batch(T0 + 9 * DAY_MS, [("later", T0 + 9 * DAY_MS)])
    assert (hour_of(T0),) not in d.older.data
    assert d.batch(T0 + 9 * DAY_MS + 1, [("old", T0)]) == [True]  # beyond the horizon


def test_a_message_without_a_plausible_device_time_is_kept_for_the_window_only() -> None:
    d = Device()
    d.batch(T0, [("clockless", 0)])
    d.batch(T0 + 2 * HOUR_MS, [("live", T0 + 2 * HOUR_MS)])
    assert (0,) not in d.older.data  # never filed under 1970
    assert d.batch(T0 + 2 * HOUR_MS + 1, [("clockless", 0)]) == [True]


def test_a_replayed_batch_decides_as_the_first_run() -> None:
    d = Device()
    d.batch(T0, [("a", T0)])
    before = (d.recent, d.spilled, dict(d.older.data))
    first = d.batch(T0 + 2 * HOUR_MS, [("a", T0), ("b", T0 + 2 * HOUR_MS)])
    d.recent, d.spilled, d.older.data = before  # the state as the checkpoint kept it
    assert d.batch(T0 + 2 * HOUR_MS, [("a", T0), ("b", T0 + 2 * HOUR_MS)]) == first


def test_state_cost_of_a_week_at_realistic_rates() -> None:
    one_per_10s = state_bytes_per_device(0.1, 3600, HORIZON_MS / 1000)
    assert one_per_10s["older"] == int(0.1 * 7 * 86400) * 8  # 8 bytes per id past the window
    assert one_per_10s["recent"] == int(0.1 * 3600 * 7 / 6) * 20  # 20 bytes per recent id
