"""How busy the machine's CPUs were over a span, from ``/proc/stat``.

A phase's gateway share of its core alone cannot say who set the pace: when the gateway's
core was busy all along with the gateway below a whole core, the rest went to the other
processes of the run (the sources, Mosquitto, ingest, the broker), which the gateway's
pinning does not keep off its core.
"""

from __future__ import annotations

from collections.abc import Mapping

#: /proc/stat columns after the name: user nice system idle iowait irq softirq steal.
_IDLE, _IOWAIT = 3, 4


def cpu_ticks() -> dict[str, tuple[int, int]]:
    """(busy, total) clock ticks so far of the machine (``cpu``) and each CPU (``cpu0``..)."""
    ticks: dict[str, tuple[int, int]] = {}
    with open("/proc/stat") as f:
        for line in f:
            if not line.startswith("cpu"):
                break
            name, *columns = line.split()
            values = [int(v) for v in columns[:8]]
            total = sum(values)
            ticks[name] = (total - values[_IDLE] - values[_IOWAIT], total)
    return ticks


def busy_share(
    before: Mapping[str, tuple[int, int]], after: Mapping[str, tuple[int, int]], name: str
) -> float:
    """The share of ``name``'s time (``cpu``: all CPUs together) busy between two readings."""
    busy = after[name][0] - before[name][0]
    total = after[name][1] - before[name][1]
    return round(busy / total, 2) if total else 0.0
