"""CPU seconds of the benchmark's process tree by part, read from ``/proc`` (Linux).

Throughput and latency on a 2-core machine move with whatever else runs on it; CPU time
per message moves much less, and says which part to work on: the Spark JVM (source,
shuffle, keyed state, Arrow to and from Python, the JIT), the Python workers (the hop and
the sink), the embedded broker. ``snapshot`` is taken before and after a phase; Spark's
Python workers are reused, so a worker that exits between the two loses only its last
task's share.
"""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path
from typing import Any

from headwater_dev.bench import server_proc

#: Parts of the tree, by a marker of their command line (first match wins).
PARTS = (
    ("broker", "kafka.Kafka"),
    ("python_workers", "pyspark.daemon"),
    ("spark_jvm", "java"),
)


def _part(cmdline: str) -> str:
    for name, marker in PARTS:
        if marker in cmdline:
            return name
    return "bench"


def snapshot(root: int | None = None) -> dict[int, tuple[str, float]]:
    """Return {pid: (part, CPU seconds so far)} of ``root`` (default: this process) and below.

    Empty where ``/proc`` is not there.
    """
    proc = Path("/proc")
    if not proc.is_dir():
        return {}
    children: dict[int, list[int]] = defaultdict(list)
    stats: dict[int, list[str]] = {}
    for d in proc.iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = server_proc.stat_fields(int(d.name))
        except OSError:  # exited meanwhile
            continue
        stats[int(d.name)] = fields
        children[int(fields[1])].append(int(d.name))  # [1]: the parent's pid
    tree, i = [root or os.getpid()], 0
    while i < len(tree):
        tree += children[tree[i]]
        i += 1
    out: dict[int, tuple[str, float]] = {}
    for pid in tree:
        try:
            cmdline = (proc / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if pid in stats:
            out[pid] = (_part(cmdline), server_proc.stat_cpu_seconds(stats[pid]))
    return out


def per_message_us(
    before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]], messages: int
) -> dict[str, float]:
    """Return the CPU microseconds per message of each part between two snapshots."""
    spent: dict[str, float] = defaultdict(float)
    for pid, (part, seconds) in after.items():
        spent[part] += seconds - (before[pid][1] if pid in before else 0.0)
    n = max(messages, 1)
    out = {f"{part}_us": round(s / n * 1e6, 1) for part, s in sorted(spent.items())}
    out["total_us"] = round(sum(spent.values()) / n * 1e6, 1)
    return out


#: Issue 40's target: the enricher's CPU per message, every process of the run counted, at
#: most ``TARGET_RATIO`` times that of ``TARGET_FLOOR`` (the JVM floor behind the design's
#: Python hop), at ``TARGET_DEVICES`` devices, both from the same run. Judged on the drain
#: (back-to-back full batches: the cost of a message, not of idle triggers); the offered
#: phase's ratio is printed beside it.
TARGET_DEVICES, TARGET_FLOOR, TARGET_RATIO = 1000, "floor-jvm-hop", 1.5


def ratio_lines(results: list[dict[str, Any]]) -> list[str]:
    """Return, per fleet size with the enricher and ``TARGET_FLOOR``, their CPU per message.

    Each line: total µs per message (``per_message_us``' ``total_us``) of both queries and
    the ratio, draining and offered; at ``TARGET_DEVICES`` the drain's ratio is judged
    against ``TARGET_RATIO``, met or MISSED.
    """
    by_query = {(r["devices"], r.get("query")): r for r in results}
    lines = []
    for devices in sorted({r["devices"] for r in results}):
        ours, floor = by_query.get((devices, "enricher")), by_query.get((devices, TARGET_FLOOR))
        if ours is None or floor is None:
            continue
        figures = {
            phase: (ours[key]["total_us"], floor[key]["total_us"])
            for phase, key in (("draining", "cpu_drain"), ("offered", "cpu_offered"))
        }
        ratios = {phase: round(a / max(b, 1e-9), 2) for phase, (a, b) in figures.items()}
        shown = "; ".join(
            f"{phase} {a} / {b} = {ratios[phase]}" for phase, (a, b) in figures.items()
        )
        line = f"{devices} devices, CPU µs a message, enricher / {TARGET_FLOOR}: {shown}"
        if devices == TARGET_DEVICES:
            ok = ratios["draining"] <= TARGET_RATIO
            line += f" (draining <= {TARGET_RATIO}) {'met' if ok else 'MISSED'}"
        lines.append(line)
    return lines
