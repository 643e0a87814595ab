"""Where the enricher's (re)start spends its time: one JSON log line at each milestone.

A driver started again on its checkpoint (a killed pod, a drained node) is held to issue
36's target: the end-to-end p99 back under 2 s within 30 s. Its log says where the time
went, each line stamped with its time:

- ``Spark session ready`` (the runner): the JVM is up, the application has its master;
- ``query started``: the query resumed from its checkpoint;
- ``first micro-batch done``: the first batch after the start, with its rows and Spark's
  durations (its ``addBatch`` holds the executors' loading of the state stores);
- ``caught up``: the first batch that read everything there was to read (no lag left),
  with the seconds since the query started.

docs/operations.md reads them after a restart; docs/benchmarks.md has a restart's timeline.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from pyspark.sql.streaming import StreamingQueryListener

from headwater.enricher.driver.metrics import lag_by_topic

log = logging.getLogger(__name__)


class StartMilestones(StreamingQueryListener):
    """Logs the milestones of each start of the query (a listener of the session)."""

    def __init__(self) -> None:
        self._started = time.monotonic()
        self._first_done = False
        self._caught_up = False

    def onQueryStarted(self, event: Any) -> None:
        """A start: the milestones begin again."""
        self._started = time.monotonic()
        self._first_done = self._caught_up = False
        log.info("query started", extra={"run_id": str(event.runId)})

    def onQueryProgress(self, event: Any) -> None:
        """Log the first batch after a start, and the first that left nothing to read."""
        p = event.progress
        since_s = round(time.monotonic() - self._started, 1)
        if not self._first_done:
            self._first_done = True
            log.info(
                "first micro-batch done",
                extra={
                    "batch": p.batchId,
                    "rows": p.numInputRows,
                    "duration_ms": dict(p.durationMs),
                    "since_query_start_s": since_s,
                },
            )
        if self._caught_up:
            return  # both logged: nothing more to work out until the next start
        lag: dict[str, int] = {}
        for s in p.sources:
            lag |= lag_by_topic({"endOffset": s.endOffset, "latestOffset": s.latestOffset})
        if lag and not any(lag.values()):
            self._caught_up = True
            log.info(
                "caught up",
                extra={"batch": p.batchId, "rows": p.numInputRows, "since_query_start_s": since_s},
            )

    def onQueryIdle(self, event: Any) -> None:
        """Nothing to log."""

    def onQueryTerminated(self, event: Any) -> None:
        """Nothing to log: the runner says how the query ended."""
