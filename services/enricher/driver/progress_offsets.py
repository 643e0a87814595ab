"""Publish the enricher's progress as consumer-group offsets, for monitoring only.

Spark's Kafka source keeps its position in the query's checkpoint and commits nothing to
Kafka, so ``headwater lag``, ``kafka-consumer-groups.sh`` and every Kafka lag exporter see
no enricher at all. This listener copies, after each finished micro-batch, the end offsets
of every source (the next offset the query will read, Kafka's own meaning of a committed
offset) to a consumer group, ``headwater-enricher`` unless
``HEADWATER_ENRICHER_PROGRESS_GROUP`` says otherwise.

**Monitoring only.** The query never reads these offsets: it starts from its checkpoint
(or from ``HEADWATER_ENRICHER_STARTING_OFFSETS`` when there is none), so moving or deleting
the group changes nothing in what the enricher processes; ``headwater offsets checkpoint``
is the tool that moves where it resumes. Nobody joins the group; the offsets are written
with the admin API, which is only allowed for a group without members.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from pyspark.sql.streaming import StreamingQueryListener

from headwater.enricher.driver.settings import EnricherSettings

log = logging.getLogger(__name__)

#: (topic, partition) -> next offset to read.
Offsets = dict[tuple[str, int], int]
#: Commits offsets to the group; raises on failure.
Committer = Callable[[str, Offsets], None]

_TIMEOUT_S = 10.0
#: Wait before committing offsets again after a failed commit.
_RETRY_S = 1.0


def end_offsets(source_end_offsets: Iterable[str | None]) -> Offsets:
    """Merge the ``endOffset`` JSON of every source of one progress event.

    Kafka sources report ``{"topic": {"partition": offset}}``; anything else (another kind
    of source, a missing offset) is skipped.
    """
    merged: Offsets = {}
    for raw in source_end_offsets:
        try:
            value = json.loads(raw or "null")
        except json.JSONDecodeError:
            continue
        if not isinstance(value, dict):
            continue
        for topic, parts in value.items():
            if not isinstance(parts, dict):
                continue
            for partition, offset in parts.items():
                # Negative values are Spark's "latest"/"earliest" markers, not positions.
                if str(partition).lstrip("-").isdigit() and int(offset) >= 0:
                    merged[(topic, int(partition))] = int(offset)
    return merged


class AdminCommitter:
    """Writes offsets with the admin API (librdkafka); ``close`` lets go of the client."""

    def __init__(self, kafka_config: dict[str, Any]) -> None:
        from confluent_kafka.admin import AdminClient

        self._admin: Any = AdminClient(kafka_config)

    def __call__(self, group: str, offsets: Offsets) -> None:
        """Commit ``offsets`` for ``group``; raise on failure (KafkaException)."""
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

        if self._admin is None:
            raise RuntimeError("closed")
        request = ConsumerGroupTopicPartitions(
            group, [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())]
        )
        futures = self._admin.alter_consumer_group_offsets([request], request_timeout=_TIMEOUT_S)
        result = futures[group].result(timeout=_TIMEOUT_S + 5)
        # The request can succeed while single partitions fail (coordinator still loading).
        failed = [tp for tp in result.topic_partitions or [] if tp.error is not None]
        if failed:
            raise RuntimeError(f"{failed[0].topic}[{failed[0].partition}]: {failed[0].error}")

    def close(self) -> None:
        """Drop the client: librdkafka's threads end with it (it has no close call)."""
        self._admin = None


class ProgressOffsetsListener(StreamingQueryListener):
    """After each finished micro-batch, commit its sources' end offsets to ``group``.

    Spark calls listeners on its listener-bus thread; the commit (a broker round trip)
    runs on a thread of its own so a slow broker never delays other listeners. Only the
    newest offsets matter, so a commit still waiting is replaced, not queued.
    """

    def __init__(self, group: str, committer: Committer) -> None:
        self.group = group
        self._commit = committer
        self._pending: Offsets | None = None
        self._busy = False
        self._stopped = False
        self._failing = False
        self._cond = threading.Condition()
        #: The offsets last committed successfully (for tests and the run's log).
        self.committed: Offsets = {}
        self._worker = threading.Thread(
            target=self._run, name="enricher-progress-offsets", daemon=True
        )
        self._worker.start()

    def onQueryStarted(self, event: Any) -> None:
        """Nothing to commit before the first batch ends."""

    def onQueryIdle(self, event: Any) -> None:
        """No batch ran: the offsets committed last still hold."""

    def onQueryProgress(self, event: Any) -> None:
        """Hand the finished batch's end offsets to the commit thread."""
        offsets = end_offsets(s.endOffset for s in event.progress.sources)
        if offsets:
            self.offer(offsets)

    def onQueryTerminated(self, event: Any) -> None:
        """Nothing to do: the last batch's offsets came with its progress event."""

    def offer(self, offsets: Offsets) -> None:
        """Commit ``offsets`` soon, replacing any not committed yet."""
        with self._cond:
            self._pending = dict(offsets)
            self._cond.notify_all()

    def flush(self, timeout_s: float = _TIMEOUT_S) -> bool:
        """Wait until nothing is pending; False if that took longer than ``timeout_s``."""
        with self._cond:
            return self._cond.wait_for(lambda: self._pending is None and not self._busy, timeout_s)

    def close(self, timeout_s: float = _TIMEOUT_S) -> None:
        """Commit what is pending (bounded by ``timeout_s``), then stop the thread."""
        self.flush(timeout_s)
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        self._worker.join(timeout_s)
        close = getattr(self._commit, "close", None)
        if close is not None:
            close()

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._stopped or self._pending is not None)
                if self._stopped:
                    return
                offsets, self._pending, self._busy = self._pending, None, True
            assert offsets is not None
            try:
                self._commit(self.group, offsets)
            except Exception as exc:
                # Monitoring must never stop the query; say so once per failure streak.
                if not self._failing:
                    log.warning(
                        "cannot commit the enricher's progress offsets (monitoring only; the "
                        "query goes on from its checkpoint)",
                        extra={"group": self.group, "error": f"{type(exc).__name__}: {exc}"},
                    )
                self._failing = True
                with self._cond:
                    if self._pending is None:  # nothing newer: try these again shortly
                        self._pending = offsets
                    self._cond.wait(_RETRY_S)
            else:
                if self._failing:
                    log.info("progress offsets committed again", extra={"group": self.group})
                self._failing = False
                self.committed = offsets
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()


def from_settings(settings: EnricherSettings) -> ProgressOffsetsListener | None:
    """Return the listener for ``settings``, or None when the progress group is turned off."""
    if not settings.commit_group:
        return None
    config = settings.kafka.admin_config("headwater-enricher-progress")
    return ProgressOffsetsListener(settings.commit_group, AdminCommitter(config))
