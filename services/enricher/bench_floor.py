"""The keyed-state floor: the enricher's query shape with none of its work, for the benchmark.

Same source, same JVM key columns, one ``transformWithState`` keyed by (tenant, device)
with one value read and one written per device and batch (the enricher's composite value
costs the same), one completion-shaped record per message through the same sink. What it
costs per batch is what PySpark's keyed state and the sink cost on this machine before any
decoding, dedup, enrichment or routing of ours: a target below it cannot be met by
changing our code, only by the design (fewer Python round trips) or the machine.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql import DataFrame, Row
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

from headwater.enricher.decode import key_columns
from headwater.enricher.schema import OUTPUT
from headwater.enricher.settings import EnricherSettings


class FloorProcessor(StatefulProcessor):
    """Counts a device's messages (one read, one write) and emits one record per ingest record."""

    def __init__(self, completions_topic: str, master_topic: str) -> None:
        self.topic = completions_topic
        self.master_topic = master_topic

    def init(self, handle: StatefulProcessorHandle) -> None:
        """Declare the one value of a device."""
        self.count = handle.getValueState("count", "n long")

    def handleInputRows(
        self, key: Any, rows: Iterator[Row], timerValues: TimerValues
    ) -> Iterator[Row]:
        """Emit each row's headers on the completions topic (the benchmark's watch reads them)."""
        now = timerValues.getCurrentProcessingTimeInMs()
        out = []
        for _tenant, device, topic, partition, offset, _value, headers in rows:
            if topic == self.master_topic:
                continue  # the enricher completes ingest records only
            out.append(
                Row(
                    topic=self.topic,
                    key=device.encode(),
                    value=b"",
                    headers=headers,  # PySpark hands structs over as dicts, as OUTPUT takes them
                    role="completion",
                    label="FLOOR",
                    ref=f"{topic}/{partition}/{offset}",
                    event_id=None,
                    received_ms=None,
                    batch_ms=now,
                )
            )
        seen = self.count.get()
        self.count.update(((seen[0] if seen else 0) + len(out),))
        return iter(out)


def floor_stream(raw: DataFrame, settings: EnricherSettings) -> DataFrame:
    """Return the floor's output records (``schema.OUTPUT``) of raw Kafka rows."""
    return (
        key_columns(raw, settings.topics.master)
        .groupBy("tenant", "device_key")
        .transformWithState(
            statefulProcessor=FloorProcessor(settings.topics.completions, settings.topics.master),
            outputStructType=OUTPUT,
            outputMode="Append",
            timeMode="ProcessingTime",
        )
    )
