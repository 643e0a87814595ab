"""Messages spread over spans of time with one latency each, for the sliding-p99 tests."""

from __future__ import annotations


def at_ten_a_second(
    origin_ms: float, spans: list[tuple[float, float, float]]
) -> tuple[list[float], list[float]]:
    """Return (times_ms, latency_ms): 10 a second over each (from_s, to_s, latency_ms).

    Times count from ``origin_ms`` (a fault, a released backlog), in order.
    """
    times: list[float] = []
    latency: list[float] = []
    for start, end, lat in spans:
        count = round((end - start) * 10)
        times += [origin_ms + start * 1000 + i * 100 for i in range(count)]
        latency += [lat] * count
    return times, latency
