"""Tell, once per move, when the leader of a partition the subscriber reads has moved.

Brokers are replaced routinely; each time the partitions they led elect new leaders and
the consumer fetches from the new one after a pause. The client does this silently (or in
debug lines, per fetch); an operator wants one line per partition and move: which
partition, from which node to which. aiokafka exposes leaders only through its client's
cluster metadata (``leader_for_partition``); it is read after every poll, a dict lookup
per assigned partition.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from aiokafka import TopicPartition

log = logging.getLogger(__name__)


class LeaderMoves:
    """Remembers each assigned partition's last known leader and logs when it changes."""

    def __init__(self, group_id: str) -> None:
        self._group = group_id
        self._leaders: dict[TopicPartition, int] = {}

    def check(self, cluster: Any, assigned: Iterable[TopicPartition]) -> None:
        """Compare the leaders ``cluster`` (aiokafka's ClusterMetadata) knows with the last.

        A leader unknown for a moment (-1 or None: mid-election) is not a move; the line
        comes when the new leader is known, so an election is one line, not two.
        """
        for tp in assigned:
            leader = cluster.leader_for_partition(tp)
            if leader is None or leader < 0:
                continue
            before = self._leaders.get(tp)
            self._leaders[tp] = leader
            if before is not None and before != leader:
                log.warning(
                    "Kafka partition leader moved",
                    extra={
                        "group": self._group,
                        "partition": f"{tp.topic}[{tp.partition}]",
                        "from_node": before,
                        "to_node": leader,
                    },
                )
