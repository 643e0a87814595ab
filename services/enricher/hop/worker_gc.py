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

While a batch is built, its rows are alive until the batch is sent, and every young
collection walks the ones not yet promoted (and the older generations each time they
grow). ``batch_scope`` lets many more allocations pass between collections: the hop's
CPU a message fell from 17.2 to 16.3-16.4 µs (``bench.hop``, docs/benchmarks.md). The
rows are mostly dicts and lists freed by reference counting; what cycles they form are
collected later.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

#: Allocations between young collections while a batch is built (Python's default: 700).
BATCH_GEN0_THRESHOLD = 100_000


def freeze_survivors() -> None:
    """Collect the task's garbage, then keep what survived out of later collections."""
    gc.collect()  # only objects created since the last freeze: cheap after the first task
    gc.freeze()


@contextmanager
def batch_scope() -> Iterator[None]:
    """Collect rarely while one batch is built; Python's thresholds again afterwards."""
    before = gc.get_threshold()
    gc.set_threshold(BATCH_GEN0_THRESHOLD, *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)
