"""Offset bookkeeping for the Kafka source: pure functions, no I/O.

Offsets travel through Spark's offset log as ``{"topic": {"partition": offset}}`` (JSON
object keys must be strings), one entry per partition, each the next offset to read.
"""

from __future__ import annotations

from collections.abc import Mapping

from headwater.enricher.errors import OffsetGapError

Offsets = dict[str, dict[str, int]]


def flatten(offsets: Mapping[str, Mapping[str, int]]) -> dict[tuple[str, int], int]:
    """Return ``{(topic, partition): offset}`` from the checkpoint form."""
    return {(tp, int(p)): int(o) for tp, parts in offsets.items() for p, o in parts.items()}


def nest(flat: Mapping[tuple[str, int], int]) -> Offsets:
    """Return the checkpoint form of ``{(topic, partition): offset}``, sorted for stable logs."""
    out: Offsets = {}
    for (topic, partition), offset in sorted(flat.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def check_range(topic: str, partition: int, start: int, low: int, high: int) -> None:
    """Raise OffsetGapError when ``start`` is not inside the log ``[low, high]``.

    Never reset: a start below the log's beginning means data was deleted before it was
    read; a start past its end means the topic was replaced. Both need a person.
    """
    if start < low:
        raise OffsetGapError(topic, partition, start, low, high, "deleted")
    if start > high:
        raise OffsetGapError(topic, partition, start, low, high, "beyond")


def admit(
    start: Mapping[tuple[str, int], int],
    available: Mapping[tuple[str, int], int],
    max_records: int | None,
) -> dict[tuple[str, int], int]:
    """Return the end offsets of the next batch, reading at most ``max_records`` in all.

    The budget is shared fairly: every partition with data gets an equal slice, and what
    a short partition leaves over goes to the others, so one busy partition cannot starve
    the rest and no partition with data is left at zero while budget remains.
    """
    end = {tp: max(start.get(tp, 0), off) for tp, off in available.items()}
    if max_records is None:
        return end
    pending = {tp: end[tp] - start.get(tp, 0) for tp in end if end[tp] > start.get(tp, 0)}
    grant = dict.fromkeys(pending, 0)
    budget = max_records
    while pending and budget > 0:
        share = max(1, budget // len(pending))
        for tp in sorted(pending):
            take = min(share, pending[tp], budget)
            grant[tp] += take
            pending[tp] -= take
            budget -= take
            if budget == 0:
                break
        pending = {tp: n for tp, n in pending.items() if n > 0}
    return {tp: start.get(tp, 0) + grant.get(tp, 0) for tp in end}
