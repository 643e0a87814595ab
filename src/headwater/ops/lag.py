"""Consumer lag per group, topic and partition, and the platform's consumer signals."""

from __future__ import annotations

import re
import urllib.request
from dataclasses import dataclass

from confluent_kafka.admin import AdminClient

from headwater.ops.offsets import PartitionOffsets, show

#: The consumer signals the enricher exports (Prometheus names), shown next to the lag.
SIGNALS = {
    "bytes_out_per_s": "headwater_enricher_output_bytes_per_second",
    "producer_to_consumer_p99_s": "headwater_enricher_producer_to_consumer_latency_seconds",
    "consumer_to_processing_p99_s": "headwater_enricher_consumer_to_processing_latency_seconds",
}


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


def group_lag(admin: AdminClient, group: str, topics: list[str] | None = None) -> GroupLag:
    """Return the lag of ``group`` on ``topics`` (default: the topics it committed)."""
    return GroupLag(group, show(admin, group, topics))


def scrape_signals(metrics_url: str, timeout_s: float = 5.0) -> dict[str, float]:
    """Read the consumer signals from a Prometheus text endpoint (missing ones are skipped)."""
    with urllib.request.urlopen(metrics_url, timeout=timeout_s) as response:
        text = response.read().decode()
    found: dict[str, float] = {}
    for signal, metric in SIGNALS.items():
        match = re.search(rf"^{metric}(?:{{[^}}]*}})? ([0-9.eE+-]+)$", text, re.MULTILINE)
        if match:
            found[signal] = float(match.group(1))
    return found
