"""Where a keyed-state task's time goes, for the benchmark (``bench/query.py``) and an operator.

The keyed state runs in a Python worker, out of reach of Spark's progress metrics, so it
measures itself: decode (with normalize), state calls, the processor's own logic, and
building output rows, plus the task's wall time from ``init`` to ``close`` (the rest is
PySpark moving rows over Arrow). When ``HEADWATER_ENRICHER_PROFILE_DIR`` is set, each task
appends one JSON line there when it ends; otherwise nothing is measured or written.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

#: Phases timed inside the keyed state, in nanoseconds.
PHASES = ("decode", "state", "logic", "emit")


class TaskProfile:
    """Counters of one keyed-state task (one partition of one micro-batch)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.start_ns = time.perf_counter_ns()
        self.ns: Counter[str] = Counter()
        self.counts: Counter[str] = Counter()
        self.batch_ms = 0

    def add(self, phase: str, since_ns: int) -> int:
        """Add the time since ``since_ns`` to ``phase``; return now (to chain phases)."""
        now = time.perf_counter_ns()
        self.ns[phase] += now - since_ns
        return now

    def write(self) -> None:
        """Append this task's line to the profile directory (one file per worker process)."""
        if not self.counts["keys"]:
            return  # a task with no device (timers only, or an empty partition)
        line = {
            "batch_ms": self.batch_ms,
            "wall_ms": (time.perf_counter_ns() - self.start_ns) / 1e6,
            **{f"{k}_ms": v / 1e6 for k, v in self.ns.items()},
            **self.counts,
        }
        path = Path(self.directory) / f"profile-{os.getpid()}.jsonl"
        with path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(line) + "\n")


def read(directory: str) -> list[dict[str, Any]]:
    """Return every task line written to ``directory``."""
    lines = []
    for path in sorted(Path(directory).glob("profile-*.jsonl")):
        lines += [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x]
    return lines


def per_batch(lines: Iterable[dict[str, Any]]) -> dict[int, dict[str, float]]:
    """Return the task lines summed per micro-batch (by batch time)."""
    out: dict[int, Counter[str]] = {}
    for line in lines:
        total = out.setdefault(line["batch_ms"], Counter())
        total.update({k: v for k, v in line.items() if k != "batch_ms"})
        total["tasks"] += 1
    return {k: dict(v) for k, v in sorted(out.items())}
