"""The topics the enricher reads and writes, one set the driver, the state and the sink share."""

from __future__ import annotations

from dataclasses import dataclass

import headwater.topics as t


@dataclass(frozen=True)
class EnricherTopics:
    """The topics the enricher reads and writes (the names of ``headwater.topics``)."""

    ingest: tuple[str, ...] = tuple(t.INGEST_TOPICS.values())
    master: str = t.MASTER_DEVICES_TOPIC
    events: tuple[tuple[str, str], ...] = tuple(t.EVENT_TOPICS.items())
    completions: str = t.COMPLETIONS_TOPIC
    deadletter: str = t.DEADLETTER_TOPIC
    retry: str = t.RETRY_TOPIC
    state: str = t.DEVICE_STATE_TOPIC

    @classmethod
    def with_prefix(cls, prefix: str) -> EnricherTopics:
        """Return the default names with ``prefix`` in front (tests, shared dev clusters)."""
        base = cls()
        return cls(
            ingest=tuple(prefix + n for n in base.ingest),
            master=prefix + base.master,
            events=tuple((k, prefix + v) for k, v in base.events),
            completions=prefix + base.completions,
            deadletter=prefix + base.deadletter,
            retry=prefix + base.retry,
            state=prefix + base.state,
        )

    def event_topic(self, event_type: str) -> str:
        """Return the topic of ``event_type`` ("telemetry", "alarm")."""
        return dict(self.events)[event_type]

    def outputs(self) -> list[str]:
        """Every topic the enricher writes."""
        return [v for _, v in self.events] + [
            self.completions,
            self.deadletter,
            self.retry,
            self.state,
        ]
