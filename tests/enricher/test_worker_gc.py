"""Spark's Python workers collect garbage after every task: what survives a task is frozen."""

from __future__ import annotations

import gc
import weakref

import pytest

from headwater.enricher.hop import worker_gc


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


def test_a_batch_scope_collects_rarely_and_gives_the_thresholds_back_even_on_error() -> None:
    before = gc.get_threshold()
    with pytest.raises(ValueError), worker_gc.batch_scope():
        assert gc.get_threshold() == (worker_gc.BATCH_GEN0_THRESHOLD, *before[1:])
        raise ValueError("a batch failed")
    assert gc.get_threshold() == before
