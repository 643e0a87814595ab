"""Spark's Python workers collect garbage after every task: what survives a task is frozen."""

from __future__ import annotations

import gc
import weakref

from headwater.enricher.executor import worker_gc


class _Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the cyclic collector frees it


def test_survivors_are_frozen_and_the_tasks_garbage_is_collected() -> None:
    """The task's cyclic garbage is freed, what it keeps is out of later collections."""
    kept = _Node()
    garbage = _Node()
    gone = weakref.ref(garbage)
    del garbage
    try:
        worker_gc.freeze_survivors()
        assert gone() is None  # collected before the freeze, not frozen with the rest
        assert gc.get_freeze_count() > 0
        # Objects created after the freeze are collected as before.
        later = _Node()
        later_ref = weakref.ref(later)
        del later
        gc.collect()
        assert later_ref() is None
        assert kept.me is kept
    finally:
        gc.unfreeze()  # the rest of the suite runs with an ordinary collector
