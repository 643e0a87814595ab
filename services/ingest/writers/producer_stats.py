"""What librdkafka's statistics say about the producer, and partitions that take no writes.

librdkafka hands its statistics (its STATISTICS.md) to ``stats_cb`` every second; the
confluent writer already reads them for the producer id. From the same JSON, at no cost
per record:

- :func:`producer_state`: the facts to look at when writes to a partition stop: the
  idempotent producer's state (``eos.idemp_state``, e.g. ``Assigned``, or ``DrainBump`` /
  ``DrainReset`` while it drains in-flight requests before bumping its epoch), its epoch
  bumps (``epoch_cnt``), each broker's connection state, and per partition its leader and
  the records queued (``msgq_cnt``), ready to send (``xmit_msgq_cnt``) and in flight
  (``msgs_inflight``) with the last acknowledged id (``acked_msgid``);
- :class:`StallWatch`: a partition whose records have waited, none acknowledged, longer
  than a leader election takes (10-20 s in the field) without one being acknowledged.
  An election stops a partition's acks for about its length and no more; longer means
  something else holds the partition (a leader that does not answer, too few in-sync
  replicas, a producer stuck in a state), and the state above says which.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

#: Records waiting this long on a partition with none acknowledged: more than an election.
STALLED_AFTER_S = 30.0


@dataclass(frozen=True)
class PartitionProgress:
    """One partition's queues and acknowledgements in one statistics emission."""

    name: str  # topic[partition]
    waiting: int  # records queued, ready to send or in flight
    acked_msgid: int


def partitions(stats: Mapping[str, Any]) -> list[PartitionProgress]:
    """Every assigned partition of every topic the producer writes (not the -1 queue)."""
    found = []
    for topic, entry in sorted(stats.get("topics", {}).items()):
        for key, p in entry.get("partitions", {}).items():
            if int(key) < 0:
                continue  # records not yet given a partition; no leader to wait on
            waiting = p.get("msgq_cnt", 0) + p.get("xmit_msgq_cnt", 0) + p.get("msgs_inflight", 0)
            found.append(PartitionProgress(f"{topic}[{key}]", waiting, p.get("acked_msgid", 0)))
    return found


def producer_state(stats: Mapping[str, Any], names: set[str] | None = None) -> dict[str, Any]:
    """A JSON-able digest of ``stats`` for a log line or a test's failure message.

    Args:
        stats: one statistics emission, parsed.
        names: the partitions (``topic[partition]``) to describe; None: every one.
    """
    eos = stats.get("eos") or {}
    brokers = {
        str(b["nodeid"]): {
            "state": b.get("state"),
            "state_age_ms": b.get("stateage", 0) // 1000,
            "requests_in_flight": b.get("waitresp_cnt", 0),
        }
        for b in stats.get("brokers", {}).values()
        if b.get("nodeid", -1) >= 0  # the bootstrap entries name no node
    }
    described = {}
    for topic, entry in sorted(stats.get("topics", {}).items()):
        for key, p in entry.get("partitions", {}).items():
            name = f"{topic}[{key}]"
            if int(key) < 0 or (names is not None and name not in names):
                continue
            described[name] = {
                field: p.get(field)
                for field in (
                    "leader",
                    "broker",
                    "msgq_cnt",
                    "xmit_msgq_cnt",
                    "msgs_inflight",
                    "acked_msgid",
                    "next_ack_seq",
                    "next_err_seq",
                )
            }
    return {
        "idemp_state": eos.get("idemp_state"),
        "idemp_state_age_ms": eos.get("idemp_stateage"),
        "producer_id": eos.get("producer_id"),
        "producer_epoch": eos.get("producer_epoch"),
        "epoch_cnt": eos.get("epoch_cnt"),
        "brokers": brokers,
        "partitions": described,
    }


class StallWatch:
    """Partitions whose records waited, unacknowledged, for ``stalled_after_s`` (see module).

    Fed every statistics emission. A partition counts as waiting from the first look at
    which it held records after its last acknowledgement; only an acknowledgement (its
    ``acked_msgid`` moving) ends the wait. Looks at which it holds none do not: while no
    broker takes a partition's writes its records time out (``message.timeout.ms``) and
    the next ones arrive later, so its queue empties now and then. It is told stalled at a
    look at which records wait, ``stalled_after_s`` after the wait began, and recovers
    at its next acknowledgement.
    """

    def __init__(
        self, stalled_after_s: float = STALLED_AFTER_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._after_s = stalled_after_s
        self._clock = clock
        self._acked: dict[str, int] = {}
        self._waiting_since: dict[str, float] = {}
        self._stalled: set[str] = set()

    @property
    def stalled(self) -> set[str]:
        """The partitions stalled now."""
        return set(self._stalled)

    def update(self, progress: list[PartitionProgress]) -> tuple[dict[str, float], list[str]]:
        """Take one emission; return (newly stalled with their seconds waited, recovered)."""
        now = self._clock()
        newly: dict[str, float] = {}
        recovered: list[str] = []
        for p in progress:
            moved = self._acked.get(p.name, p.acked_msgid) != p.acked_msgid
            self._acked[p.name] = p.acked_msgid
            if moved:
                self._waiting_since.pop(p.name, None)
                if p.name in self._stalled:
                    self._stalled.discard(p.name)
                    recovered.append(p.name)
            if not p.waiting:
                continue
            since = self._waiting_since.setdefault(p.name, now)
            if p.name not in self._stalled and now - since >= self._after_s:
                self._stalled.add(p.name)
                newly[p.name] = now - since
        return newly, recovered
