"""Keep Spark's per-task garbage collection cheap in the enricher's Python workers.

Spark's Python daemon reuses a worker for task after task and runs a full ``gc.collect()``
after each one. A worker that has imported the enricher (protobuf modules, the units
registry, the normalizers, the Kafka producer) holds ~65,000 tracked objects, and that
collection took ~60 ms every time: a py-spy profile of the benchmark's offered phase found
35% of all Python CPU there, more than decoding and normalizing.

What survives a task (modules, caches, the producer) lives as long as the worker, so at the
end of each task it is frozen (``gc.freeze``), after one collection of what the task itself
left: later collections look only at newer objects. Frozen objects are still freed by
reference counting; only a reference cycle among them would stay until the worker exits.
"""

from __future__ import annotations

import gc


def freeze_survivors() -> None:
    """Collect the task's garbage, then keep what survived out of later collections."""
    gc.collect()  # only objects created since the last freeze: cheap after the first task
    gc.freeze()
