"""The errors of the enricher: one root, each carrying what an operator needs to act.

Bad *data* never raises (it becomes a dead letter); these errors are about configuration
and the state of the log, and they stop the query on purpose.
"""

from __future__ import annotations


class EnricherError(Exception):
    """Root of every error the enricher raises."""

    #: Running again later, unchanged, may succeed.
    retriable: bool = False


class StartingOffsetsRequiredError(EnricherError):
    """No checkpoint exists and no starting offsets were given: a person must choose."""

    def __init__(self, checkpoint_location: str) -> None:
        super().__init__(
            f"no checkpoint at {checkpoint_location!r} and no starting offsets: set "
            "HEADWATER_ENRICHER_STARTING_OFFSETS (or --starting-offsets) to 'earliest' to "
            "process everything still in the ingest topics, or 'latest' to start with new data"
        )
        self.checkpoint_location = checkpoint_location


class OffsetGapError(EnricherError):
    """The checkpointed offsets no longer match the log: data was deleted or the topic replaced.

    The query stops instead of skipping or resetting, so nothing is lost silently.
    """

    def __init__(
        self, topic: str, partition: int, wanted: int, low: int, high: int, kind: str
    ) -> None:
        if kind == "deleted":
            what = (
                f"offsets {wanted}..{low - 1} of {topic}[{partition}] were deleted (retention "
                f"or delete-records) before the enricher read them; the log now starts at {low}"
            )
        else:
            what = (
                f"the checkpoint expects {topic}[{partition}] to hold offset {wanted}, but the "
                f"log ends at {high}: the topic was recreated or truncated"
            )
        super().__init__(
            f"{what}. Nothing was skipped. To go on, a person decides: replay the lost data "
            "from its source into the ingest topic, or accept the loss by starting a new "
            "checkpoint location with HEADWATER_ENRICHER_STARTING_OFFSETS=earliest (or latest)"
        )
        self.topic = topic
        self.partition = partition
        self.wanted = wanted
        self.low = low
        self.high = high
        self.kind = kind


class KafkaDeliveryError(EnricherError):
    """The broker did not acknowledge records the sink produced; Spark retries the task."""

    retriable = True

    def __init__(self, failures: int, first_error: str) -> None:
        super().__init__(f"{failures} record(s) not acknowledged by the broker: {first_error}")
        self.failures = failures
        self.first_error = first_error


class PartitionStalledError(EnricherError):
    """A partition did not deliver the planned offset range in time."""

    retriable = True

    def __init__(self, topic: str, partition: int, position: int, end: int) -> None:
        super().__init__(
            f"{topic}[{partition}] stopped at offset {position} before the planned end {end}; "
            "is the broker reachable?"
        )
