"""The enricher's query in the test process: settings for a test, and a check that it lives.

The ``running`` fixture that starts queries on the session's Spark is in
tests/enricher/conftest.py, next to the ``spark`` fixture it needs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
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
