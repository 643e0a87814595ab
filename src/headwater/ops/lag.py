"""Consumer lag per group, topic and partition, and the platform's consumer signals.

The enricher is a Spark query: its position lives in its checkpoint, not in a consumer
group. It copies that position after every batch to the group
``HEADWATER_ENRICHER_PROGRESS_GROUP`` (default ``headwater-enricher``) for monitoring only,
so the group answers "how far is the enricher" while it runs; when it is down,
:func:`checkpoint_lag` reads the checkpoint's offset log itself, which is what a restart
resumes from.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from headwater.ops.checkpoint import read_checkpoint
from headwater.ops.enricher_position import EnricherPosition
from headwater.ops.offsets import PartitionOffsets, positions, show

# The consumer signals shown next to the lag, computed from the enricher's counter and
# histograms (re-exported: the CLI imports them from here).
from headwater.ops.scrape import SIGNALS, scrape_signals  # noqa: F401

_TIMEOUT_S = 15
#: Kafka's internal topic of committed offsets, created by the first commit.
_OFFSETS_TOPIC = "__consumer_offsets"


@dataclass(frozen=True)
class GroupLag:
    """The lag of one group."""

    group: str
    partitions: list[PartitionOffsets]

    @property
    def max_lag(self) -> int:
        """The largest lag of any partition (never-committed partitions count as 0)."""
        return max((p.lag or 0 for p in self.partitions), default=0)

    def rows(self) -> list[dict[str, object]]:
        """One row per partition."""
        return [{"group": self.group, **p.as_row()} for p in self.partitions]


def enricher_group() -> str:
    """Return the group the enricher commits its progress to (``headwater-enricher``)."""
    return EnricherPosition.from_env().group


def group_lag(admin: AdminClient, group: str, topics: list[str] | None = None) -> GroupLag:
    """Return the lag of ``group`` on ``topics`` (default: the topics it committed)."""
    # Before any group committed anything the cluster has no offsets topic: there is nothing
    # to show, and asking would only make the broker create it (offsets.committed_offsets
    # waits for the coordinator that then loads it).
    if _OFFSETS_TOPIC not in admin.list_topics(timeout=_TIMEOUT_S).topics:
        return GroupLag(group, [])
    return GroupLag(group, show(admin, group, topics))


def checkpoint_lag(
    admin: AdminClient, location: str | Path, topics: list[str] | None = None
) -> GroupLag:
    """Return the lag of the enricher's checkpoint: where its next batch will start.

    Read from the checkpoint's offset log (its last committed batch), so it works while the
    enricher is down. Every partition of the checkpoint's topics is listed; one the
    checkpoint does not hold yet (added since) shows no committed offset, and a topic no
    longer on the brokers is left out.
    """
    view = read_checkpoint(location)
    starts = {
        (str(row["topic"]), int(str(row["partition"]))): int(str(row["next_offset"]))
        for row in view.rows()
    }
    wanted = topics or sorted({t for t, _ in starts})
    metadata = admin.list_topics(timeout=_TIMEOUT_S).topics
    partitions = [
        TopicPartition(t, p)
        for t in wanted
        if t in metadata
        for p in sorted(metadata[t].partitions)
    ]
    return GroupLag(f"checkpoint:{view.location}", positions(admin, partitions, starts))
