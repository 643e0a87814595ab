"""The gateway's answers during one phase, kept compact: a phase holds up to a million OKs.

Filled on the load's event loop (:mod:`load`) and read by the phases from another thread:
appends to an ``array`` and single dict stores are atomic under the GIL, and readers look
only at the prefix that existed when they asked.
"""

from __future__ import annotations

import bisect
import itertools
import time
from array import array
from collections import Counter
from collections.abc import Iterable

from headwater.gateway.answers import DeliveryReport

#: Bits of a packed coordinate that hold the offset (the partition is above them).
OFFSET_BITS = 40


def coordinate(partition: int, offset: int) -> int:
    """One int for a (partition, offset): a dict key 3x smaller than a tuple."""
    return partition << OFFSET_BITS | offset


class OkLedger:
    """Every OK (when, partition, offset, message id) and every other answer, by code."""

    def __init__(self) -> None:
        #: When each OK arrived (``time.monotonic``), in arrival order, and its partition.
        self.ok_at = array("d")
        self.ok_partition = array("B")
        #: Packed coordinate -> message id of each OK (a message sent twice has two).
        self.acked: dict[int, str] = {}
        self.retried: Counter[str] = Counter()
        self.rejected: Counter[str] = Counter()

    def record(self, outcome: DeliveryReport) -> None:
        """The gateway client's ``on_outcome``: one message's answer."""
        if outcome.status == "delivered":
            # The partition first: readers take len(ok_at) OKs, each then has its partition.
            self.ok_partition.append(outcome.partition)
            self.ok_at.append(time.monotonic())
            self.acked[coordinate(outcome.partition, outcome.offset)] = outcome.message_id
        elif outcome.status == "retry":
            self.retried[outcome.code] += 1
        else:
            self.rejected[outcome.code] += 1

    @property
    def oks(self) -> int:
        """OKs so far (a message answered OK twice counts twice)."""
        return len(self.ok_at)

    def goodput(self, start: float, end: float) -> float:
        """OKs per second between ``start`` and ``end`` (arrival times only grow)."""
        within = bisect.bisect_left(self.ok_at, end) - bisect.bisect_left(self.ok_at, start)
        return within / (end - start) if end > start else 0.0

    def times_on(self, partitions: Iterable[int]) -> list[float]:
        """When each OK on one of ``partitions`` arrived, in order."""
        wanted = set(partitions)
        n = len(self.ok_at)
        return [
            t for t, p in zip(self.ok_at[:n], self.ok_partition[:n], strict=True) if p in wanted
        ]

    def first_ok_on(self, partitions: Iterable[int], after: float) -> float | None:
        """When the first OK on one of ``partitions`` after ``after`` arrived; None: none yet."""
        wanted = set(partitions)
        for i in range(bisect.bisect_right(self.ok_at, after), len(self.ok_at)):
            if self.ok_partition[i] in wanted:
                return self.ok_at[i]
        return None


def silence_around(times: list[float], fault_at: float, until: float) -> tuple[float, float]:
    """The longest stretch without an OK that ends after ``fault_at``: (its start, its end).

    ``times``: sorted OK times on what the fault touched. Answers already on their way when
    it struck still arrive just after it, so the longest gap, not the first OK after the
    fault, is the silence. With no OK since the fault, the stretch runs to ``until``.
    """
    i = bisect.bisect_right(times, fault_at)
    edges = [times[i - 1] if i else fault_at, *times[i:]]
    if len(edges) == 1:
        return edges[0], until
    return max(itertools.pairwise(edges), key=lambda gap: gap[1] - gap[0])
