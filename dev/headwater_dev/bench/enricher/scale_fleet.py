"""The scale benchmark's fleet: one fleet's topics, checkpoint and query, and the run's clock.

Used by ``scale`` (the phases) and ``scale_restart`` (the driver killed and started again).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import random
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from headwater.enricher.driver.settings import EnricherSettings
from headwater.enricher.topics import EnricherTopics
from headwater.errors import HeadwaterError
from headwater.kafka.admin import ensure_topics
from headwater.kafka.settings import KafkaSettings
from headwater.topics import TopicSpec
from headwater_dev.bench.enricher import traffic


class OutOfTime(HeadwaterError, RuntimeError):
    """The run's time bound (``--max-minutes``) passed."""


@dataclasses.dataclass
class Clock:
    """The run's deadline: every wait is bounded by what is left of it."""

    deadline: float

    def left(self, at_most: float) -> float:
        """Return the seconds a wait may take: ``at_most``, or less near the deadline."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise OutOfTime("the run's time bound (--max-minutes) passed")
        return min(at_most, left)


def scattered_record(i: int, devices: int, run: str, received_ms: int) -> tuple[bytes, bytes, Any]:
    """Return record ``i`` of an offered phase: a random device's, as ingest writes it.

    ``traffic.telemetry_record`` numbers devices round robin; at 1,000,000 devices and
    5,000 msg/s that would walk the key space in order, so the state's reads and writes
    would meet neighbouring keys. Random devices are the worst case and the usual one.
    """
    # Message ids of their own ("o"): never those of the round-robin backlogs' records.
    return traffic.telemetry_record(
        random.randrange(devices) + devices * i, devices, run + "o", received_ms
    )


@dataclasses.dataclass
class Fleet:
    """One fleet's query: its topics, checkpoint and settings, and the run's shared parts."""

    spark: Any
    bootstrap: str
    devices: int
    work: Path
    args: argparse.Namespace
    clock: Clock
    prefix: str = dataclasses.field(init=False)
    topics: EnricherTopics = dataclasses.field(init=False)
    settings: EnricherSettings = dataclasses.field(init=False)
    run: str = dataclasses.field(default_factory=lambda: uuid.uuid4().hex[:6])
    written: int = 0  # ingest records written so far (the next record's number)

    def __post_init__(self) -> None:
        self.prefix = f"scale{uuid.uuid4().hex[:6]}."
        self.topics = EnricherTopics.with_prefix(self.prefix)
        names = [*self.topics.ingest, self.topics.master, *self.topics.outputs()]
        ensure_topics(self.bootstrap, [TopicSpec(t, 4, 1, {}) for t in names])
        self.settings = EnricherSettings(
            checkpoint_location=str(self.work / f"checkpoint-{self.devices}"),
            starting_offsets="earliest",
            topics=self.topics,
            kafka=KafkaSettings(bootstrap_servers=self.bootstrap),
            shuffle_partitions=self.args.shuffle_partitions,
        )
        self.stats = str(self.work / f"sink-stats-{self.devices}.jsonl")

    def start(self, batch_records: int, trigger_seconds: float) -> Any:
        """Start the enricher's query on the fleet's checkpoint; return it."""
        from headwater.enricher.driver import job

        settings = dataclasses.replace(
            self.settings,
            max_records_per_trigger=batch_records,
            trigger_interval_seconds=trigger_seconds,
        )
        return job.write_stream(
            job.enrich_stream(job.read_ingest(self.spark, settings), settings),
            settings,
            self.stats,
        )

    def backlog(self, n: int) -> None:
        """Write ``n`` more ingest records, round robin over the fleet's devices."""
        traffic.fill_backlog(
            self.bootstrap, self.topics.ingest[0], n, self.devices, self.run, first=self.written
        )
        self.written += n

    def wait(self, watch: traffic.CompletionWatch, query: Any, count: int) -> None:
        """Wait for ``count`` completions within the run's time bound."""
        traffic.wait_for(watch, query, count, self.clock.left(1800))
        if watch.count < count:
            raise OutOfTime(f"{watch.count} of {count} completions within the time bound")


def stop_between_batches(query: Any, bound_s: float = 60.0) -> None:
    """Stop ``query`` once its batches with rows are committed: completions show before that.

    A query stopped in its batch's commit aborts the batch, and the next start processes
    it again (its completions twice): the next phase would count them as its own. Done: a
    batch without rows reported progress after the last batch with rows (the keyed state's
    timers make Spark run such batches back to back), or no batch runs and no data waits.
    """
    deadline = time.monotonic() + bound_s  # also after the run's time bound passed
    idle = 0
    while idle < 2 and time.monotonic() < deadline and query.isActive:
        status = query.status
        quiet = not status["isTriggerActive"] and not status["isDataAvailable"]
        idle = idle + 1 if quiet or rows_committed(query.recentProgress) else 0
        time.sleep(0.25)
    query.stop()


def rows_committed(progress: list[Any]) -> bool:
    """Return True when a batch without rows came after every batch with rows."""
    batches = [json.loads(p.json) for p in progress]
    with_rows = [b["batchId"] for b in batches if b.get("numInputRows", 0) > 0]
    without = [b["batchId"] for b in batches if b.get("numInputRows", 0) == 0]
    return bool(without) and max(without) > max(with_rows, default=-1)


@contextlib.contextmanager
def running(
    fleet: Fleet, batch_records: int, trigger_seconds: float, from_end: bool = True
) -> Iterator[tuple[Any, traffic.CompletionWatch]]:
    """Run the fleet's query and a watch of its completions; stop both between batches."""
    watch = traffic.CompletionWatch(fleet.bootstrap, fleet.topics.completions, from_end)
    watch.start()
    query = fleet.start(batch_records, trigger_seconds)
    try:
        yield query, watch
    finally:
        stop_between_batches(query)
        watch.stop_flag = True
        watch.join(10)
