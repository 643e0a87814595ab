"""Why a subscriber stops; each error carries what a person needs to act on it."""

from __future__ import annotations

from headwater.errors import HeadwaterError


class SubscriberError(HeadwaterError, RuntimeError):
    """The root of the subscriber's errors."""


class StartPointRequiredError(SubscriberError):
    """A partition has no usable committed offset, and the subscriber never guesses one.

    Raised when the group has never committed an offset for the partition (and no explicit
    ``start`` was given), or when its committed offset is no longer in the log (retention
    deleted it, or the topic was recreated). The message names the operator command that
    sets a start point.
    """

    def __init__(self, group_id: str, topic: str, partition: int, why: str) -> None:
        self.group_id = group_id
        self.topic = topic
        self.partition = partition
        self.why = why
        super().__init__(
            f"consumer group {group_id!r}, {topic}[{partition}]: {why}. The subscriber never "
            "chooses a start point by itself. With the subscriber stopped, look at the log "
            f"and the group (headwater offsets show --group {group_id}), then set one: "
            f"headwater offsets reset --group {group_id} --topic {topic} "
            "--to earliest|latest|timestamp|offset [--value V] --execute "
            "(see headwater offsets reset --help). A group that never ran may instead "
            "start with start='earliest' or 'latest' (HEADWATER_SUBSCRIBER_START), given "
            "explicitly for that first run."
        )


class DeadLetterTopicError(SubscriberError):
    """The subscriber's dead-letter topic cannot be written to, so nothing could be parked."""

    retriable = True

    def __init__(self, topic: str, why: str) -> None:
        self.topic = topic
        super().__init__(
            f"dead-letter topic {topic!r}: {why}. Create it before the subscriber starts "
            "(for example a Strimzi KafkaTopic, or kafka-topics.sh --create), with a "
            "retention long enough for a person to look at what is parked there."
        )
