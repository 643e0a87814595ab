"""The enricher's query in the test process: settings for a test, and a check that it lives.

The ``running`` fixture that starts queries on the session's Spark is in
tests/enricher/conftest.py, next to the ``spark`` fixture it needs.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from headwater.enricher.driver.settings import EnricherSettings
from headwater.enricher.topics import EnricherTopics
from headwater.kafka.settings import KafkaSettings


def settings_for(
    bootstrap: str, topics: EnricherTopics, checkpoint: str, **kw: Any
) -> EnricherSettings:
    """Settings of a test's query: from the earliest offsets, fast triggers and retries."""
    base = EnricherSettings(
        checkpoint_location=checkpoint,
        starting_offsets="earliest",
        trigger_interval_seconds=0.2,
        retry_backoff_seconds=1.0,
        max_attempts=3,
        topics=topics,
        # The embedded broker supports confluent-kafka's idempotent producer.
        kafka=KafkaSettings(bootstrap_servers=bootstrap),
    )
    return dataclasses.replace(base, **kw)


def alive(q: Any) -> Callable[[], None]:
    """A tick for ``TopicReader.until``: fails the test as soon as the query ``q`` failed."""

    def tick() -> None:
        if q.exception() is not None:
            raise AssertionError(f"query failed: {q.exception()}")

    return tick


class ProgressLog:
    """Every progress a query reports, as JSON (``recentProgress`` keeps only the last 100).

    ``listener`` goes to ``spark.streams.addListener`` before the query starts (the
    ``progress_log`` fixture of tests/enricher/conftest.py does that).
    """

    def __init__(self) -> None:
        from pyspark.sql.streaming import StreamingQueryListener

        self.batches: list[dict[str, Any]] = []
        log = self.batches

        class _Listener(StreamingQueryListener):
            def onQueryStarted(self, event: Any) -> None:
                """Nothing to keep."""

            def onQueryIdle(self, event: Any) -> None:
                """Nothing to keep."""

            def onQueryTerminated(self, event: Any) -> None:
                """Nothing to keep."""

            def onQueryProgress(self, event: Any) -> None:
                log.append(json.loads(event.progress.json))

        self.listener = _Listener()

    def batch_reading(self, topic: str, partition: int, offset: int) -> int | None:
        """Return the id of the batch that read ``offset``, None if none reported it yet."""
        for b in self.batches:
            for source in b.get("sources", []):
                end = (source.get("endOffset") or {}).get(topic, {})
                start = (source.get("startOffset") or {}).get(topic, {})
                if start.get(str(partition), 0) <= offset < end.get(str(partition), 0):
                    return int(b["batchId"])
        return None

    def batches_reading(self, topic: str, first: dict[str, int], last: dict[str, int]) -> list[int]:
        """Return the batches that read records of ``topic`` from ``first`` to ``last``.

        Waits (60 s at most) until the batches reported cover ``last``: a batch's
        completions are visible before Spark posts its progress, so the progress read as
        soon as a completion shows can lack the batch that wrote it.
        """
        deadline = time.monotonic() + 60
        while True:
            used, reached = [], dict.fromkeys(last, 0)
            for progress in list(self.batches):
                for source in progress.get("sources", []):
                    start = (source.get("startOffset") or {}).get(topic, {})
                    end = (source.get("endOffset") or {}).get(topic, {})
                    for p in reached:
                        reached[p] = max(reached[p], end.get(p, 0))
                    if any(end.get(p, 0) > max(start.get(p, 0), first[p]) for p in first):
                        used.append(progress["batchId"])
            if all(reached[p] >= last[p] for p in last):
                return sorted(set(used))
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"no progress reported reading {topic} up to {last}: {reached}"
                )
            time.sleep(0.2)

    def batch_at(self, ms: int) -> int:
        """Return the id of the batch that ran at ``ms`` (a completion's ``completed_time``).

        A batch's time (its offset log's) is taken just after its progress' trigger start.
        """
        started = [
            (datetime.fromisoformat(b["timestamp"]).timestamp() * 1000, int(b["batchId"]))
            for b in self.batches
        ]
        return max(bid for at, bid in started if at <= ms)


def spark_memory(spark: Any) -> dict[str, float]:
    """Return the resident MiB of the session's Spark JVM (now and peak) and Python workers.

    The workers' sum counts the pages a forked worker shares with its daemon once per
    process, so their number and the largest one are given too.
    """
    from headwater_dev.bench.enricher import cpu
    from headwater_dev.bench.enricher.scale_probes import memory, rss_mib

    jvm_pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    workers = [p for p, (part, _) in cpu.snapshot(jvm_pid).items() if part == "python_workers"]
    largest = max((rss_mib(p)["rss_mib"] for p in workers), default=0.0)
    return memory(jvm_pid) | {"python_workers": len(workers), "largest_worker_rss_mib": largest}
