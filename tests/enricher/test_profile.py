"""The keyed state's per-task profile: lines written per task, summed per micro-batch."""

from __future__ import annotations

import time
from pathlib import Path

from headwater.enricher.python_operator import profile


def test_task_lines_are_summed_per_batch(tmp_path: Path) -> None:
    for batch_ms, rows in ((1000, 10), (1000, 5), (2000, 7)):
        task = profile.TaskProfile(str(tmp_path))
        task.batch_ms = batch_ms
        task.add("decode", time.perf_counter_ns() - 2_000_000)  # 2 ms ago
        task.counts.update(keys=1, rows_in=rows)
        task.write()
    empty = profile.TaskProfile(str(tmp_path))  # a task that saw no device writes nothing
    empty.write()
    batches = profile.per_batch(profile.read(str(tmp_path)))
    assert sorted(batches) == [1000, 2000]
    assert (batches[1000]["rows_in"], batches[1000]["keys"], batches[1000]["tasks"]) == (15, 2, 2)
    assert batches[1000]["decode_ms"] >= 4.0
    assert batches[2000]["rows_in"] == 7
