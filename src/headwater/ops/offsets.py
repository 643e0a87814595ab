"""Consumer-group offsets: show them against the log, and reset them only on purpose.

Nothing in Headwater moves an offset by itself. A reset is computed first (dry run), is
refused while the group has active members, and is applied only with an explicit flag
or an interactive confirmation.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

from headwater.errors import HeadwaterError
from headwater.kafka.diagnose import connected_admin
from headwater.kafka.settings import KafkaSettings, resolve_kafka

_TIMEOUT = 15


class OffsetsError(HeadwaterError, RuntimeError):
    """An offset operation cannot go ahead; the message says what to do instead."""


@dataclass(frozen=True)
class PartitionOffsets:
    """Where a group stands in one partition."""

    topic: str
    partition: int
    committed: int | None
    log_start: int
    log_end: int

    @property
    def lag(self) -> int | None:
        """Records between the committed offset and the log end (None: never committed)."""
        return None if self.committed is None else max(0, self.log_end - self.committed)

    def as_row(self) -> dict[str, object]:
        """Return the fields as a dict for rendering."""
        return {
            "topic": self.topic,
            "partition": self.partition,
            "committed": "-" if self.committed is None else self.committed,
            "log_start": self.log_start,
            "log_end": self.log_end,
            "lag": "-" if self.lag is None else self.lag,
            "out_of_range": self.committed is not None
            and not self.log_start <= self.committed <= self.log_end,
        }


def admin_client(kafka: KafkaSettings | str) -> AdminClient:
    """Return an AdminClient (bootstrap servers alone: security from the environment).

    It has tried the cluster once: a refused login or TLS handshake fails here, naming the
    setting; an unreachable cluster fails at the first request, as callers expect.

    Raises:
        headwater.kafka.diagnose.KafkaSetupError: login or TLS refused (names the setting).
    """
    return connected_admin(resolve_kafka(kafka), "headwater-ops", _TIMEOUT, require=False)


def _partitions(admin: AdminClient, topics: list[str]) -> list[TopicPartition]:
    metadata = admin.list_topics(timeout=_TIMEOUT).topics
    missing = [t for t in topics if t not in metadata]
    if missing:
        raise OffsetsError(f"no such topics: {', '.join(missing)}")
    return [TopicPartition(t, p) for t in topics for p in sorted(metadata[t].partitions)]


def log_offsets(
    admin: AdminClient, partitions: list[TopicPartition], spec: OffsetSpec
) -> dict[tuple[str, int], int]:
    """Return the offset ``spec`` resolves to for each partition."""
    if not partitions:
        return {}
    futures = admin.list_offsets({tp: spec for tp in partitions}, request_timeout=_TIMEOUT)
    return {(tp.topic, tp.partition): f.result().offset for tp, f in futures.items()}


#: Answers of a group coordinator that is not ready yet (a broker that has just started,
#: a coordinator that moved): asked again until it is, within ``_TIMEOUT``.
_COORDINATOR_NOT_READY = {
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.NOT_COORDINATOR,
}


def _await_coordinator(admin: AdminClient, group: str) -> None:
    """Return once the group's coordinator answers (raise its error after ``_TIMEOUT``).

    librdkafka 2.16 crashes the whole process (SIGSEGV) when a ListConsumerGroupOffsets
    answer is "coordinator load in progress", as right after a broker starts, while
    DescribeConsumerGroups reports the same as an error: so that is asked first.
    """
    deadline = time.monotonic() + _TIMEOUT
    while True:
        try:
            admin.describe_consumer_groups([group])[group].result()
            return
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            ready_soon = isinstance(error, KafkaError) and error.code() in _COORDINATOR_NOT_READY
            if not ready_soon or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def committed_offsets(admin: AdminClient, group: str) -> dict[tuple[str, int], int]:
    """Return the group's committed offsets by (topic, partition)."""
    _await_coordinator(admin, group)
    future = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group]
    return {
        (tp.topic, tp.partition): tp.offset
        for tp in future.result().topic_partitions or []
        if tp.offset >= 0
    }


def show(admin: AdminClient, group: str, topics: list[str] | None = None) -> list[PartitionOffsets]:
    """Return the group's position in every partition of ``topics`` (default: committed)."""
    committed = committed_offsets(admin, group)
    wanted = topics or sorted({t for t, _ in committed})
    return positions(admin, _partitions(admin, wanted) if wanted else [], committed)


def positions(
    admin: AdminClient, partitions: list[TopicPartition], committed: dict[tuple[str, int], int]
) -> list[PartitionOffsets]:
    """Return ``committed`` (by topic and partition) against each partition's log start and end."""
    start = log_offsets(admin, partitions, OffsetSpec.earliest())
    end = log_offsets(admin, partitions, OffsetSpec.latest())
    return [
        PartitionOffsets(
            tp.topic,
            tp.partition,
            committed.get((tp.topic, tp.partition)),
            start[(tp.topic, tp.partition)],
            end[(tp.topic, tp.partition)],
        )
        for tp in partitions
    ]


def group_state(admin: AdminClient, group: str) -> ConsumerGroupState:
    """Return the group's state (EMPTY or DEAD means nobody is consuming)."""
    return admin.describe_consumer_groups([group])[group].result().state


@dataclass(frozen=True)
class ResetPlan:
    """The offsets a reset would commit, next to where the group is now."""

    group: str
    moves: list[tuple[PartitionOffsets, int]]

    def rows(self) -> list[dict[str, object]]:
        """Return one row per partition: from, to."""
        return [{**po.as_row(), "reset_to": target} for po, target in self.moves]


def plan_reset(
    admin: AdminClient, group: str, topics: list[str], to: str, value: int | None = None
) -> ResetPlan:
    """Compute a reset of ``group`` on ``topics`` to earliest, latest, timestamp or offset."""
    current = show(admin, group, topics)
    partitions = [TopicPartition(p.topic, p.partition) for p in current]
    if to == "earliest":
        targets = log_offsets(admin, partitions, OffsetSpec.earliest())
    elif to == "latest":
        targets = log_offsets(admin, partitions, OffsetSpec.latest())
    elif to == "timestamp":
        if value is None:
            raise OffsetsError("--to timestamp needs --value <epoch milliseconds>")
        targets = log_offsets(admin, partitions, OffsetSpec.for_timestamp(value))
        ends = log_offsets(admin, partitions, OffsetSpec.latest())
        # No record at or after the timestamp: the broker answers -1; start at the end.
        targets = {k: (v if v >= 0 else ends[k]) for k, v in targets.items()}
    elif to == "offset":
        if value is None:
            raise OffsetsError("--to offset needs --value <offset>")
        targets = {(p.topic, p.partition): value for p in current}
        for p in current:
            if not p.log_start <= value <= p.log_end:
                raise OffsetsError(
                    f"offset {value} is outside {p.topic}/{p.partition} "
                    f"[{p.log_start}, {p.log_end}]"
                )
    else:
        raise OffsetsError(f"unknown reset target {to!r}: use earliest, latest, timestamp, offset")
    return ResetPlan(group, [(p, targets[(p.topic, p.partition)]) for p in current])


def apply_reset(admin: AdminClient, plan: ResetPlan) -> None:
    """Commit the plan's offsets; refuse while the group has active members."""
    state = group_state(admin, plan.group)
    if state not in (ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD):
        raise OffsetsError(
            f"group {plan.group!r} is {state.name}: stop its consumers first (offsets of an "
            "active group cannot be changed safely)"
        )
    request = ConsumerGroupTopicPartitions(
        plan.group, [TopicPartition(p.topic, p.partition, target) for p, target in plan.moves]
    )
    admin.alter_consumer_group_offsets([request])[plan.group].result()
