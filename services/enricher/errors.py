"""The errors of the enricher: one root under Headwater's, each carrying what is needed to act.

The errors here are about configuration and the state of the log: they stop the query on
purpose. Bad *data* never stops it: the hop's errors (``NormalizeError``, ``MediaTypeError``,
``UnitError``, ``SizeBudgetExceeded``) share this root but become dead letters where they
are raised. A CPU budget interruption is no error but a signal (``hop.budget``).
"""

from __future__ import annotations

import re

from headwater.errors import HeadwaterError


class EnricherError(HeadwaterError):
    """Root of every error the enricher raises (``retriable``: running again may succeed)."""


class StartingOffsetsRequiredError(EnricherError):
    """No checkpoint exists and no starting offsets were given: a person must choose."""

    def __init__(self, checkpoint_location: str) -> None:
        super().__init__(
            f"no checkpoint at {checkpoint_location!r} and no starting offsets: set "
            "HEADWATER_ENRICHER_STARTING_OFFSETS (or --starting-offsets) to 'earliest' to "
            "process everything still in the ingest topics, or 'latest' to start with new data"
        )
        self.checkpoint_location = checkpoint_location


def recovery_advice(topic: str, partition: int | str) -> str:
    """Return what an operator can do when the log lost offsets the checkpoint needs."""
    return (
        "Nothing was skipped. To go on, a person decides: replay the lost data from its "
        "source into the ingest topic, or skip the gap: stop the enricher, run `headwater "
        f"offsets checkpoint set-start --topic {topic} --partition {partition} --log-start` "
        "(a dry run; add --execute), and start it again. A new checkpoint location with "
        "HEADWATER_ENRICHER_STARTING_OFFSETS=earliest (or latest) starts over instead"
    )


#: How Spark's Kafka source names the partition whose offsets are gone: deleted under the
#: query (retention, delete-records), or a log that now ends before the checkpoint.
_DELETED = re.compile(r"offset \[(\d+), (\d+)\) for topic partition (\S+)-(\d+)")
_CHANGED = re.compile(r"Partition (\S+)-(\d+)(?:'s)? offset was changed from (\d+) to (\d+)")


class DataLossError(EnricherError):
    """The log no longer holds offsets the checkpoint needs; the query stopped, skipping none."""

    def __init__(self, spark_message: str) -> None:
        deleted, changed = _DELETED.search(spark_message), _CHANGED.search(spark_message)
        if deleted:
            first, end, topic, partition = deleted.groups()
            what = (
                f"offsets {first}..{int(end) - 1} of {topic}[{partition}] are no longer in "
                "Kafka (retention or delete-records) and the enricher had not read them"
            )
        elif changed:
            topic, partition, was, now = changed.groups()
            what = (
                f"the checkpoint expects {topic}[{partition}] to hold offset {was}, but the "
                f"log now ends at {now}: the topic was recreated or truncated"
            )
        else:
            topic, partition = "<topic>", "<partition>"
            what = "Spark's Kafka source found data of the checkpoint missing from Kafka"
        super().__init__(f"{what}. {recovery_advice(topic, partition)}")
        self.topic = topic
        self.partition = partition


#: Spark's refusals of a checkpoint whose state another operator (or layout) wrote, such as
#: the Python state operator of earlier releases: which one Spark reports first depends on
#: what the checkpoint's state metadata already records.
STATE_REFUSALS = (
    "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE",
    "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE",
    "STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA",
)


def explain_failure(message: str) -> str:
    """Return an operator's one-paragraph account of a stopped query's error text."""
    if "Some data may have been lost" in message or "KAFKA_DATA_LOSS" in message:
        return str(DataLossError(message))
    if any(code in message for code in STATE_REFUSALS):
        return (
            "the checkpoint holds state in another layout than this enricher's (for example "
            "the Python state operator's of an earlier release): nothing was processed. Start "
            "with a new checkpoint location (HEADWATER_ENRICHER_CHECKPOINT_LOCATION) as "
            "docs/enricher.md 'Upgrading: the state format changed' says, or run the release "
            "that wrote the checkpoint. Spark: "
            + message.split("=== Streaming Query ===")[0].split("\n")[0].strip()
        )
    # Spark appends the query's plan and a JVM stack; the first part says what happened.
    return message.split("=== Streaming Query ===")[0].split("\n\tat ")[0].strip()


class KafkaDeliveryError(EnricherError):
    """The broker did not acknowledge records the sink produced; Spark retries the task."""

    retriable = True

    def __init__(self, failures: int, first_error: str) -> None:
        super().__init__(f"{failures} record(s) not acknowledged by the broker: {first_error}")
        self.failures = failures
        self.first_error = first_error
